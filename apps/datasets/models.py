"""Datasets: named per project, each with numbered versions that are filled while open and
immutable once committed; a committed version's manifest is its DatasetFile rows."""

from django.conf import settings
from django.core.validators import MaxLengthValidator, RegexValidator
from django.db import models

from apps.core.models import Archivable, TenantModel

name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
    "Use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.",
)


class VersionState(models.TextChoices):
    OPEN = "open"
    COMMITTED = "committed"


class StorageKind(models.TextChoices):
    POSIX = "posix"
    S3 = "s3"


class Dataset(Archivable, TenantModel):
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="datasets")
    project = models.ForeignKey(
        "tenancy.Project", on_delete=models.CASCADE, related_name="datasets"
    )
    name = models.CharField(max_length=64, validators=[name_validator])
    description = models.TextField(
        blank=True, default="", max_length=10_000, validators=[MaxLengthValidator(10_000)]
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="uniq_dataset_name")
        ]
        ordering = ["project", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def storage_prefix(self) -> str:
        """The storage key every version of this dataset lies under."""
        return f"{self.project.tenant.slug}/{self.project.slug}/datasets/{self.pk}"


class DatasetVersion(TenantModel):
    tenant_path = "dataset__tenant"

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=VersionState.choices, default=VersionState.OPEN)
    storage_kind = models.CharField(
        max_length=8, choices=StorageKind.choices, default=StorageKind.POSIX
    )
    file_count = models.PositiveIntegerField(default=0)
    size_bytes = models.PositiveBigIntegerField(default=0)
    manifest_sha256 = models.CharField(max_length=64, blank=True, default="")
    committed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The job attempt that wrote this version (batch inference outputs), if any.
    source_attempt = models.ForeignKey(
        "jobs.JobAttempt",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="written_dataset_versions",
    )
    notes = models.TextField(
        blank=True, default="", max_length=10_000, validators=[MaxLengthValidator(10_000)]
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="uniq_dataset_version")
        ]
        ordering = ["dataset", "number"]

    def __str__(self) -> str:
        return f"{self.dataset.name}:{self.number}"

    @property
    def storage_prefix(self) -> str:
        """The storage key every file of this version lies under."""
        return f"{self.dataset.storage_prefix}/v{self.number}"

    def file_key(self, path: str) -> str:
        return f"{self.storage_prefix}/{path}"


class DatasetFile(TenantModel):
    """One line of a version's manifest."""

    tenant_path = "version__dataset__tenant"

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1024)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "path"], name="uniq_dataset_file_path")
        ]
        ordering = ["version", "path"]

    def __str__(self) -> str:
        return self.path


class DatasetUpload(TenantModel):
    """A file being uploaded into an open version: where its bytes are (storage upload id)
    and how many have arrived (for the storage quota); gone once the file is finished."""

    tenant_path = "version__dataset__tenant"

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="uploads")
    path = models.CharField(max_length=1024)
    upload_id = models.CharField(max_length=256)
    received = models.PositiveBigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "path"], name="uniq_dataset_upload_path")
        ]

    def __str__(self) -> str:
        return f"{self.version}/{self.path} ({self.received} bytes)"
