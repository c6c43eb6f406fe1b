"""The model registry: models per project, their immutable versions (artifact files with a
manifest, metrics, parameters, a card, lineage to the job and the data), aliases that move
between versions, and the webhooks told about both."""

import re

from django.conf import settings
from django.core.validators import MaxLengthValidator
from django.db import models

from apps.core.models import Archivable, TenantModel

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ALIAS_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
TAG_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")


class RegisteredModel(Archivable, TenantModel):
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(
        "tenancy.Project", on_delete=models.CASCADE, related_name="registered_models"
    )
    name = models.CharField(max_length=100)
    description = models.TextField(
        blank=True, default="", max_length=10_000, validators=[MaxLengthValidator(10_000)]
    )
    tags = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # the last number handed out (a row lock on the model numbers versions)
    last_number = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="uniq_registered_model")
        ]

    def __str__(self) -> str:
        return self.name


class VersionState(models.TextChoices):
    OPEN = "open"  # files are being uploaded through the API
    PENDING = "pending"  # being copied in from the tenant's tree by the worker
    READY = "ready"  # committed: immutable, downloadable
    FAILED = "failed"  # the copy failed; `error` says why


class Stage(models.TextChoices):
    NONE = "none"
    STAGING = "staging"
    PRODUCTION = "production"
    ARCHIVED = "archived"


# stage -> the stages a version may move to from there
STAGE_MOVES: dict[str, frozenset[str]] = {
    Stage.NONE: frozenset({Stage.STAGING, Stage.PRODUCTION, Stage.ARCHIVED}),
    Stage.STAGING: frozenset({Stage.NONE, Stage.PRODUCTION, Stage.ARCHIVED}),
    Stage.PRODUCTION: frozenset({Stage.STAGING, Stage.ARCHIVED}),
    Stage.ARCHIVED: frozenset({Stage.NONE}),
}


class ModelVersion(TenantModel):
    tenant_path = "model__tenant"

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    state = models.CharField(max_length=8, choices=VersionState.choices, default="open")
    stage = models.CharField(max_length=12, choices=Stage.choices, default=Stage.NONE)
    storage = models.CharField(max_length=8, default="posix")
    framework = models.CharField(max_length=64, blank=True, default="")
    description = models.TextField(
        blank=True, default="", max_length=10_000, validators=[MaxLengthValidator(10_000)]
    )
    # Markdown, stored and served as text
    card = models.TextField(
        blank=True, default="", max_length=256 * 1024, validators=[MaxLengthValidator(256 * 1024)]
    )
    metrics = models.JSONField(default=dict, blank=True)  # {name: number}
    params = models.JSONField(default=dict, blank=True)  # {name: string}
    tags = models.JSONField(default=dict, blank=True)
    source_job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_attempt = models.ForeignKey(
        "jobs.JobAttempt",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="model_versions",
    )
    source_path = models.CharField(max_length=1024, blank=True, default="")
    on_success = models.BooleanField(default=False)  # by the job's spec (register_model)
    dataset_versions = models.ManyToManyField(
        "datasets.DatasetVersion", blank=True, related_name="model_versions"
    )
    file_count = models.PositiveIntegerField(default=0)
    size_bytes = models.BigIntegerField(default=0)
    manifest_sha256 = models.CharField(max_length=64, blank=True, default="")
    error = models.TextField(blank=True, default="")
    ready_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["model", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["model", "number"], name="uniq_model_version"),
            # a job registers one version on success, however often the task runs
            models.UniqueConstraint(
                fields=["model", "source_attempt"],
                condition=models.Q(on_success=True),
                name="uniq_model_version_on_success",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model.name}:{self.number}"

    @property
    def tenant_id(self):
        return self.model.tenant_id

    @property
    def key_prefix(self) -> str:
        """Where its files live in storage (the contract's model key prefix)."""
        project = self.model.project
        return f"{project.tenant.slug}/{project.slug}/models/{self.model_id}/v{self.number}"


class ModelFile(TenantModel):
    """One artifact file of a version: its manifest row. While the version is open,
    `upload_id` is the storage's resumable upload."""

    tenant_path = "version__model__tenant"

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1024)
    size = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True, default="")
    upload_id = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["version", "path"]
        constraints = [models.UniqueConstraint(fields=["version", "path"], name="uniq_model_file")]

    def __str__(self) -> str:
        return self.path


class ModelAlias(TenantModel):
    """A name (production, staging, ...) pointing at one version of a model. Every move is in
    the audit log (action `model.alias`)."""

    tenant_path = "model__tenant"

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="aliases")
    name = models.CharField(max_length=40)
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="aliases")

    class Meta:
        ordering = ["model", "name"]
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="uniq_model_alias")]

    def __str__(self) -> str:
        return f"{self.model.name}@{self.name}"


class WebhookEvent(models.TextChoices):
    VERSION_CREATED = "model_version.created"
    ALIAS_CHANGED = "alias.changed"


class Webhook(TenantModel):
    """A URL of a tenant's that receives signed POSTs on registry events."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=2000)
    events = models.JSONField()  # WebhookEvent values, at least one
    description = models.CharField(max_length=200, blank=True, default="")
    # The HMAC key. Shown once, at creation; kept to sign (it cannot be a one-way hash).
    secret = models.CharField(max_length=100)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["tenant", "created_at"]
        constraints = [
            models.CheckConstraint(condition=~models.Q(events=[]), name="webhook_has_events")
        ]

    def __str__(self) -> str:
        return self.url


class DeliveryState(models.TextChoices):
    PENDING = "pending"  # waiting for its (next) try
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # every try used, or refused for good (a forbidden address)


class WebhookDelivery(TenantModel):
    """One event for one webhook, and how its tries went: the delivery log."""

    tenant_path = "webhook__tenant"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    payload = models.JSONField()
    state = models.CharField(max_length=12, choices=DeliveryState.choices, default="pending")
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event} -> {self.webhook_id} ({self.state})"
