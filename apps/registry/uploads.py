"""A version's files uploaded through the API: resumable appends at an offset, the commit that
computes the manifest from the stored bytes, and a small version in one call."""

import hashlib
from collections.abc import Iterable
from typing import BinaryIO

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.core.queries import unique_row
from apps.datasets.storage.base import CHUNK_BYTES, UploadOffsetMismatch
from apps.registry.files import file_key, version_finish, version_storage
from apps.registry.models import ModelFile, ModelVersion, RegisteredModel, VersionState
from apps.registry.validation import MAX_FILES, file_path_problem
from apps.registry.versions import version_create
from apps.tenancy.policies import authorize


def version_upload(
    *, actor: Actor, version: ModelVersion, path: str, offset: int, chunks: Iterable[bytes]
) -> int:
    """Append bytes to one file of an open version at `offset` (which must be what is stored:
    a dropped upload resumes from the size a Conflict reports). Returns the stored size."""
    authorize(
        actor,
        resource="model",
        action="create-version",
        tenant_id=version.tenant_id,
        target=version.model,
    )
    problem = file_path_problem(path)
    if problem:
        raise ValidationError({"path": [problem]})
    if version.state != VersionState.OPEN:
        raise Conflict(
            f"Version {version.number} is {version.state}; files can no longer be added."
        )
    storage = version_storage(version)
    key = file_key(version, path)
    with transaction.atomic():
        row = unique_row(ModelFile.objects.select_for_update().filter(version=version, path=path))
        if row is None:
            if version.files.count() >= MAX_FILES:
                raise ValidationError({"path": [f"A version holds at most {MAX_FILES} files."]})
            if offset != 0:
                raise Conflict(f"No upload of {path!r} yet: start at offset 0 (stored: 0).")
            row = ModelFile.objects.create(
                version=version, path=path, upload_id=storage.begin_upload(key=key)
            )
        elif offset == 0 and not row.upload_id:
            row.upload_id = storage.begin_upload(key=key)  # replacing a finished file
        try:
            size = storage.append(key=key, upload_id=row.upload_id, offset=offset, chunks=chunks)
        except UploadOffsetMismatch as exc:
            raise Conflict(
                f"The upload of {path!r} holds {exc.stored} bytes; continue at that offset"
                f" (stored: {exc.stored})."
            ) from None
        row.size = size
        row.save(update_fields=["size", "upload_id", "updated_at"])
    return size


def upload_status(*, version: ModelVersion, path: str) -> int:
    row = unique_row(version.files.filter(path=path))
    if row is None:
        return 0
    if row.upload_id:
        return version_storage(version).upload_size(
            key=file_key(version, path), upload_id=row.upload_id
        )
    return row.size


def version_commit(*, actor: Actor, version: ModelVersion) -> ModelVersion:
    """Finish an open version: every upload completed, the manifest computed server-side from
    the stored bytes, the prefix sealed. Committing twice leaves one ready version."""
    authorize(
        actor,
        resource="model",
        action="create-version",
        tenant_id=version.tenant_id,
        target=version.model,
    )
    with transaction.atomic():
        version = (
            ModelVersion.objects.select_for_update()
            .select_related("model__project__tenant")
            .get(pk=version.pk)
        )
        if version.state == VersionState.READY:
            return version
        if version.state != VersionState.OPEN:
            raise Conflict(f"Version {version.number} is {version.state}.")
        if not version.files.exists():
            raise ValidationError({"files": ["Upload at least one file before committing."]})
        storage = version_storage(version)
        for row in version.files.select_for_update():
            key = file_key(version, row.path)
            if row.upload_id:
                storage.finish_upload(key=key, upload_id=row.upload_id)
            digest, size = hashlib.sha256(), 0
            with storage.open(key=key) as stream:
                while chunk := stream.read(CHUNK_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
            row.sha256, row.size, row.upload_id = digest.hexdigest(), size, ""
            row.save(update_fields=["sha256", "size", "upload_id", "updated_at"])
        return version_finish(version, actor=actor)


def version_create_with_files(
    *, actor: Actor, model: RegisteredModel, files: list[tuple[str, BinaryIO]], **fields
) -> ModelVersion:
    """A small version in one call: created, its files stored, committed. Every path is
    checked before anything is written."""
    if not files:
        raise ValidationError({"files": ["Give at least one file."]})
    if len(files) > MAX_FILES:
        raise ValidationError({"files": [f"At most {MAX_FILES} files."]})
    for path, _ in files:
        problem = file_path_problem(path)
        if problem:
            raise ValidationError({"files": [f"{path[:200]!r}: {problem}"]})
    version = version_create(actor=actor, model=model, **fields)
    for path, handle in files:
        version_upload(
            actor=actor,
            version=version,
            path=path,
            offset=0,
            chunks=iter(lambda handle=handle: handle.read(CHUNK_BYTES), b""),
        )
    return version_commit(actor=actor, version=version)
