"""A project's secrets: name -> value, the value only ever stored encrypted (crypto.py)."""

from django.conf import settings
from django.db import models

from apps.core.models import TenantModel


class ProjectSecret(TenantModel):
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenancy.Project", on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=128)
    # a Fernet token (ASCII); never the plaintext, never rendered by any serializer
    ciphertext = models.TextField()
    version = models.PositiveIntegerField(default=1)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="uniq_project_secret_name")
        ]
        ordering = ["project", "name"]

    def __str__(self) -> str:
        return self.name


class SecretUse(models.Model):
    """A secret as one attempt received it (its ciphertext, copied at dispatch): what the log
    shipper and the log API mask in that attempt's output, even after the secret is replaced
    or deleted. Goes with the attempt."""

    id = models.BigAutoField(primary_key=True)
    attempt = models.ForeignKey(
        "jobs.JobAttempt", on_delete=models.CASCADE, related_name="secret_uses"
    )
    name = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    ciphertext = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["attempt"])]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"
