"""Datasets and their versions: create a dataset, open a version (the project's datasets/ area
made first: apps/datasets/areas.py), commit it (once, under a row lock), discard it.

Authorisation is the API layer's (apps/tenancy/policies.py); these functions keep the
invariants: a committed version never changes, its files are sealed in storage, and the
storage quota is checked when bytes arrive (apps/datasets/uploads.py, directories.py) and
again at commit.
"""

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core.actor import Actor
from apps.datasets.areas import project_storage_ensure
from apps.datasets.errors import DatasetConflict
from apps.datasets.manifest import check_open, manifest_digest, tenant_project
from apps.datasets.models import Dataset, DatasetVersion, VersionState
from apps.datasets.storage import storage_for
from apps.quotas.services import storage_admit
from apps.tenancy.audit import audit_record
from apps.tenancy.models import Project


def actor_user(actor: Actor | None):
    return actor.user if actor is not None else None


def audit(actor, *, tenant_id, action: str, target, changes=None) -> None:
    audit_record(
        actor=actor, tenant_id=tenant_id, action=action, target=target, changes=changes or {}
    )


# -- datasets ----------------------------------------------------------------------------------


def dataset_create(
    *, actor: Actor | None, project: Project, name: str, description: str = ""
) -> Dataset:
    dataset = Dataset(
        tenant_id=project.tenant_id,
        project=project,
        name=name,
        description=description,
        created_by=actor_user(actor),
    )
    dataset.full_clean(exclude=["tenant", "project", "created_by"], validate_unique=False)
    try:
        with transaction.atomic():
            dataset.save()
            audit(actor, tenant_id=project.tenant_id, action="dataset.create", target=dataset)
    except IntegrityError as exc:
        raise DatasetConflict(
            f"A dataset named {name!r} exists in project {project.slug} already.",
            code="dataset_exists",
        ) from exc
    return dataset


# -- versions ----------------------------------------------------------------------------------


def version_create(
    *,
    actor: Actor | None,
    dataset: Dataset,
    notes: str = "",
    source_attempt=None,
    storage_kind: str | None = None,
) -> DatasetVersion:
    """Open the next version of `dataset` (numbers start at 1 and never repeat), stored in
    `storage_kind` ("posix" or "s3"; default settings.TORUS_DATASET_STORAGE)."""
    kind = storage_kind or settings.TORUS_DATASET_STORAGE
    if kind == "posix":
        project_storage_ensure(project=dataset.project)
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        last = locked.versions.order_by("-number").values_list("number", flat=True).first()
        version = DatasetVersion.objects.create(
            dataset=locked,
            number=(last or 0) + 1,
            storage_kind=kind,
            created_by=actor_user(actor),
            source_attempt=source_attempt,
            notes=notes,
        )
        audit(actor, tenant_id=dataset.tenant_id, action="dataset.version.create", target=version)
    version.dataset = dataset
    return version


# -- commit ------------------------------------------------------------------------------------


def version_commit(*, actor: Actor | None, version: DatasetVersion) -> DatasetVersion:
    """Make an open version immutable: its manifest fixed, its files sealed. Two commits at
    once: the row lock lets one through; the other finds it committed (409)."""
    tenant_id, project_id = tenant_project(version)
    with transaction.atomic():
        locked = (
            DatasetVersion.objects.select_for_update()
            .select_related("dataset__project__tenant")
            .get(pk=version.pk)
        )
        check_open(locked)
        pending = list(locked.uploads.values_list("path", flat=True)[:5])
        if pending:
            raise DatasetConflict(
                "Uploads are unfinished (finish or cancel them first): " + ", ".join(pending),
                code="uploads_pending",
            )
        lines = list(locked.files.values_list("path", "size", "sha256"))
        # the limit may have been lowered since the bytes arrived
        storage_admit(tenant_id=tenant_id, project_id=project_id, add_bytes=0)
        locked.file_count = len(lines)
        locked.size_bytes = sum(size for _, size, _ in lines)
        locked.manifest_sha256 = manifest_digest(lines)
        locked.state = VersionState.COMMITTED
        locked.committed_at = timezone.now()
        locked.save()
        storage_for(locked.storage_kind).seal(prefix=locked.storage_prefix)
        audit(
            actor,
            tenant_id=tenant_id,
            action="dataset.version.commit",
            target=locked,
            changes={"manifest_sha256": [None, locked.manifest_sha256]},
        )
    return locked


def version_discard(*, actor: Actor | None, version: DatasetVersion) -> None:
    """Delete an open version, its files and unfinished uploads."""
    with transaction.atomic():
        locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
        check_open(locked)
        storage = storage_for(locked.storage_kind)
        for upload in locked.uploads.all():
            storage.abort_upload(key=locked.file_key(upload.path), upload_id=upload.upload_id)
        storage.delete(prefix=version.storage_prefix)
        audit(
            actor,
            tenant_id=version.dataset.tenant_id,
            action="dataset.version.discard",
            target=locked,
        )
        locked.delete()
