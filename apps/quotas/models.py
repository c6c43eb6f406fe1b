"""Quotas (limits per tenant, project or user) and the usage ledger."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.core.models import TenantModel

# 100 million GPU-hours a month: about 137,000 GPUs busy all month
MAX_GPU_HOURS_PER_MONTH = 100_000_000


class Quota(TenantModel):
    """Limits for a tenant (project and user empty), a project, or a user in a tenant.

    An empty limit means unlimited. GPUs, CPUs, memory and running jobs count what admitted,
    unfinished jobs hold; GPU-hours count the calendar month's ledger plus running attempts;
    storage counts the bytes stored and being uploaded (apps that store files report them).
    """

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="quotas")
    project = models.ForeignKey(
        "tenancy.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="quotas"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="quotas",
    )
    gpus = models.PositiveIntegerField(null=True, blank=True)
    cpus = models.PositiveIntegerField(null=True, blank=True)
    memory_mb = models.PositiveIntegerField(null=True, blank=True)
    running_jobs = models.PositiveIntegerField(null=True, blank=True)
    gpu_hours_per_month = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_GPU_HOURS_PER_MONTH)],
    )
    # bytes of datasets and model files (tenant and project quotas; checked at upload and commit)
    storage_bytes = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "project", "user"],
                name="uniq_quota_scope",
                nulls_distinct=False,
            )
        ]
        ordering = ["tenant", "project", "user"]

    def __str__(self) -> str:
        return f"quota {self.scope_label}"

    @property
    def scope_label(self) -> str:
        if self.project_id and self.user_id:
            return f"user {self.user.username} in project {self.project.slug}"
        if self.project_id:
            return f"project {self.project.slug}"
        if self.user_id:
            return f"user {self.user.username}"
        return f"tenant {self.tenant.slug}"


class UsageRecord(TenantModel):
    """GPU- and CPU-seconds one attempt used, written when the attempt ends."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="usage")
    project = models.ForeignKey("tenancy.Project", on_delete=models.CASCADE, related_name="usage")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="usage")
    attempt = models.OneToOneField(
        "jobs.JobAttempt", on_delete=models.CASCADE, related_name="usage"
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    gpus = models.PositiveIntegerField(default=0)
    cpus = models.PositiveIntegerField(default=0)
    gpu_seconds = models.FloatField(default=0)
    cpu_seconds = models.FloatField(default=0)

    class Meta:
        ordering = ["-ended_at"]
        indexes = [models.Index(fields=["tenant", "ended_at"])]

    def __str__(self) -> str:
        return f"{self.job_id} #{self.attempt_id}: {self.gpu_seconds:.0f} GPU-s"
