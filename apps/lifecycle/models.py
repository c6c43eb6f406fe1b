"""A purge: an operator's removal of an archived thing and everything under it, run as a
resumable task (apps/lifecycle/purge.py). The row outlives what it purged: it is the record
that the thing existed and is gone (restoring it answers 409), and where a crashed purge
resumes (the steps already done)."""

from django.conf import settings
from django.db import models

from apps.core.models import BaseModel


class Kind(models.TextChoices):
    TENANT = "tenant", "Tenant"
    PROJECT = "project", "Project"
    DATASET = "dataset", "Dataset"
    MODEL = "model", "Model"
    DEPLOYMENT = "deployment", "Deployment"


class PurgeState(models.TextChoices):
    RUNNING = "running", "Running"
    DONE = "done", "Done"


class Purge(BaseModel):
    kind = models.CharField(max_length=16, choices=Kind.choices)
    target_id = models.UUIDField()
    target_repr = models.CharField(max_length=200)
    # not foreign keys: the tenant itself may be what is purged
    tenant_id_value = models.UUIDField()
    tenant_slug = models.CharField(max_length=50)
    state = models.CharField(max_length=8, choices=PurgeState.choices, default=PurgeState.RUNNING)
    steps_done = models.JSONField(default=list, blank=True)
    runs = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "target_id"], name="uniq_purge_target")
        ]

    def __str__(self) -> str:
        return f"purge {self.kind} {self.target_repr} ({self.state})"
