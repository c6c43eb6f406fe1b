"""Writes for datasets: create, open a version, fill it (streamed uploads or a registered
directory), commit it (once, under a row lock), discard it.

Authorisation is the API layer's (apps/tenancy/policies.py); these functions keep the
invariants: a committed version never changes, its files are sealed in storage, and the
storage quota is checked when bytes arrive and again at commit.
"""

import hashlib
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.core.actor import Actor
from apps.core.exceptions import Conflict, Unavailable
from apps.datasets.models import (
    Dataset,
    DatasetFile,
    DatasetUpload,
    DatasetVersion,
    VersionState,
)
from apps.datasets.paths import file_path_problem, source_dir_problem
from apps.datasets.storage import storage_for
from apps.datasets.storage.base import CHUNK_BYTES, StorageError, UploadOffsetMismatch
from apps.identity import tree
from apps.identity.storage import project_root, tenant_root
from apps.quotas.services import storage_admit
from apps.tenancy.audit import audit_record
from apps.tenancy.models import Project


class DatasetConflict(Conflict):
    """A conflict with a code clients can act on (HTTP 409)."""

    code = "conflict"

    def __init__(self, message: str, *, code: str | None = None, **details):
        super().__init__(message)
        if code:
            self.code = code
        self.details = details


class StorageUnavailable(Unavailable):
    code = "storage_unavailable"
    message = "The project's storage could not be prepared (no worker answered); try again later."


def _user(actor: Actor | None):
    return actor.user if actor is not None else None


def _audit(actor, *, tenant_id, action: str, target, changes=None) -> None:
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
        created_by=_user(actor),
    )
    dataset.full_clean(exclude=["tenant", "project", "created_by"], validate_unique=False)
    try:
        with transaction.atomic():
            dataset.save()
            _audit(actor, tenant_id=project.tenant_id, action="dataset.create", target=dataset)
    except IntegrityError as exc:
        raise DatasetConflict(
            f"A dataset named {name!r} exists in project {project.slug} already.",
            code="dataset_exists",
        ) from exc
    return dataset


# -- storage areas -----------------------------------------------------------------------------


def project_storage_ensure(*, project: Project) -> None:
    """The project's datasets/ directory in its tree, made by a worker through the privileged
    helper when missing; StorageUnavailable when no worker answers in time."""
    if (project_root(project) / "datasets").is_dir():
        return
    from celery.exceptions import TimeoutError as CeleryTimeout

    from apps.datasets.tasks import project_storage_ensure as task

    result = task.delay(str(project.pk))
    try:
        result.get(timeout=settings.TORUS_STORAGE_ENSURE_TIMEOUT, propagate=True)
    except CeleryTimeout as exc:
        raise StorageUnavailable("no worker made the project's storage in time") from exc
    except Exception as exc:  # the worker failed (directory unreachable, filesystem)
        raise StorageUnavailable(f"the worker could not make the project's storage: {exc}") from exc
    finally:
        result.forget()


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
            created_by=_user(actor),
            source_attempt=source_attempt,
            notes=notes,
        )
        _audit(actor, tenant_id=dataset.tenant_id, action="dataset.version.create", target=version)
    version.dataset = dataset
    return version


def _check_open(version: DatasetVersion) -> None:
    if version.state != VersionState.OPEN:
        raise DatasetConflict(
            f"Version {version.number} is committed: it cannot change.", code="version_committed"
        )


def _checked_path(path) -> str:
    problem = file_path_problem(path)
    if problem:
        raise ValidationError({"path": [problem]})
    return path


def _check_no_clash(version: DatasetVersion, path: str) -> None:
    """A file may not sit where another file's directory is, nor below another file."""
    parts = path.split("/")
    parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
    clash = (
        DatasetFile.objects.filter(version=version)
        .filter(Q(path__in=parents) | Q(path__startswith=path + "/"))
        .values_list("path", flat=True)
        .first()
    )
    if clash is not None:
        raise DatasetConflict(
            f"{path} clashes with {clash} (a file cannot also be a directory).",
            code="path_clash",
        )


@dataclass
class UploadState:
    path: str
    offset: int
    complete: bool
    file: DatasetFile | None = None


def upload_state(*, version: DatasetVersion, path: str) -> UploadState:
    """Where an upload of `path` stands: the bytes stored (resume from there), or complete."""
    _checked_path(path)
    upload = DatasetUpload.objects.filter(version=version, path=path).first()
    if upload is not None:
        storage = storage_for(version.storage_kind)
        try:
            offset = storage.upload_size(key=version.file_key(path), upload_id=upload.upload_id)
        except StorageError:
            offset = 0
        return UploadState(path=path, offset=offset, complete=False)
    done = DatasetFile.objects.filter(version=version, path=path).first()
    if done is not None:
        return UploadState(path=path, offset=done.size, complete=True, file=done)
    return UploadState(path=path, offset=0, complete=False)


def _tenant_project(version: DatasetVersion) -> tuple:
    return version.dataset.tenant_id, version.dataset.project_id


def upload_append(
    *,
    actor: Actor | None,
    version: DatasetVersion,
    path: str,
    offset: int,
    total: int,
    length: int,
    chunks: Iterable[bytes],
) -> UploadState:
    """Append `length` bytes (`chunks`) at `offset` to the upload of `path`, whose final size
    is `total`; when the stored size reaches `total` the file is hashed and added to the
    version's manifest. Bytes that arrived before an interruption stay stored: the client asks
    `upload_state` and continues from its offset. The quota is checked for `length` first."""
    _checked_path(path)
    if offset < 0 or total < 0 or length < 0 or offset + length > total:
        raise ValidationError({"offset": ["offset + Content-Length must not pass total."]})
    storage = storage_for(version.storage_kind)
    key = version.file_key(path)
    tenant_id, project_id = _tenant_project(version)
    with transaction.atomic():
        locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
        _check_open(locked)
        upload = DatasetUpload.objects.filter(version=locked, path=path).first()
        if upload is None:
            _check_no_clash(locked, path)
            if offset != 0:
                raise DatasetConflict(
                    f"No upload of {path} is in progress: start at offset 0.",
                    code="offset_mismatch",
                    offset=0,
                )
            upload = DatasetUpload.objects.create(
                version=locked,
                path=path,
                upload_id=storage.begin_upload(key=key),
                created_by=_user(actor),
            )
        stored = storage.upload_size(key=key, upload_id=upload.upload_id)
        if stored != offset:
            raise DatasetConflict(
                f"The upload of {path} holds {stored} bytes; continue at offset {stored}.",
                code="offset_mismatch",
                offset=stored,
            )
        # room for this request's bytes, counted until they are stored
        storage_admit(tenant_id=tenant_id, project_id=project_id, add_bytes=length)
        upload.received = offset + length
        upload.save(update_fields=["received", "updated_at"])

    # a whole file in one request is hashed on the way, in its own thread (beside the write)
    digest = _BackgroundHash() if offset == 0 else None
    counted = 0

    def counted_chunks() -> Iterator[bytes]:
        nonlocal counted
        for chunk in chunks:
            if counted + len(chunk) > length:
                raise ValidationError({"body": ["The body is longer than its Content-Length."]})
            counted += len(chunk)
            if digest is not None:
                digest.update(chunk)
            yield chunk

    try:
        stored = storage.append(
            key=key, upload_id=upload.upload_id, offset=offset, chunks=counted_chunks()
        )
    except UploadOffsetMismatch as exc:  # a concurrent request for the same file won
        raise DatasetConflict(str(exc), code="offset_mismatch", offset=exc.stored) from exc
    finally:
        sha256 = digest.hexdigest() if digest is not None else None
        # what is really stored now counts (an interrupted body stored less than reserved)
        try:
            now = storage.upload_size(key=key, upload_id=upload.upload_id)
        except StorageError:
            now = 0
        DatasetUpload.objects.filter(pk=upload.pk).update(received=now)
    if stored < total:
        return UploadState(path=path, offset=stored, complete=False)
    if stored != counted:
        sha256 = None
    return _upload_finish(version=version, upload=upload, size=stored, sha256=sha256)


class _BackgroundHash:
    """sha256 of the chunks handed to it, computed in a thread of its own (hashlib releases
    the GIL), so hashing overlaps with receiving and writing. Chunks are handed over in
    batches of about 4 MiB (few wake-ups); at most 4 batches wait."""

    BATCH = 4 * 1024 * 1024

    def __init__(self):
        self._digest = hashlib.sha256()
        self._queue: queue.Queue = queue.Queue(maxsize=4)
        self._batch: list[bytes] = []
        self._batched = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            for chunk in batch:
                self._digest.update(chunk)

    def update(self, chunk: bytes) -> None:
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= self.BATCH:
            self._queue.put(self._batch)
            self._batch, self._batched = [], 0

    def hexdigest(self) -> str:
        if self._batch:
            self._queue.put(self._batch)
            self._batch, self._batched = [], 0
        self._queue.put(None)
        self._thread.join()
        return self._digest.hexdigest()


def _hash_stream(stream) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    while chunk := stream.read(CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def _upload_finish(
    *, version: DatasetVersion, upload: DatasetUpload, size: int, sha256: str | None
) -> UploadState:
    """Put the uploaded bytes in place and add the manifest line. The upload's row blocks a
    commit until the line is written, so this needs the version's lock only at the end."""
    storage = storage_for(version.storage_kind)
    key = version.file_key(upload.path)
    storage.finish_upload(key=key, upload_id=upload.upload_id)
    if sha256 is None:  # resumed across requests: hash what is stored, streaming
        with storage.open(key=key) as stream:
            sha256, size = _hash_stream(stream)
    with transaction.atomic():
        locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
        _check_open(locked)
        file = _file_record(locked, path=upload.path, size=size, sha256=sha256)
        upload.delete()
    return UploadState(path=upload.path, offset=size, complete=True, file=file)


def _file_record(version: DatasetVersion, *, path: str, size: int, sha256: str) -> DatasetFile:
    """Add (or replace) a manifest line and keep the version's totals (row locked by caller)."""
    previous = DatasetFile.objects.filter(version=version, path=path).first()
    if previous is not None:
        DatasetVersion.objects.filter(pk=version.pk).update(
            size_bytes=F("size_bytes") - previous.size + size
        )
        previous.size, previous.sha256 = size, sha256
        previous.save(update_fields=["size", "sha256", "updated_at"])
        return previous
    DatasetVersion.objects.filter(pk=version.pk).update(
        size_bytes=F("size_bytes") + size, file_count=F("file_count") + 1
    )
    return DatasetFile.objects.create(version=version, path=path, size=size, sha256=sha256)


def upload_abort(*, version: DatasetVersion, path: str) -> None:
    """Drop an unfinished upload of `path` and its bytes."""
    _checked_path(path)
    upload = DatasetUpload.objects.filter(version=version, path=path).first()
    if upload is None:
        return
    storage_for(version.storage_kind).abort_upload(
        key=version.file_key(path), upload_id=upload.upload_id
    )
    upload.delete()


def file_remove(*, version: DatasetVersion, path: str) -> None:
    """Remove a file from an open version."""
    _checked_path(path)
    with transaction.atomic():
        locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
        _check_open(locked)
        previous = DatasetFile.objects.filter(version=locked, path=path).first()
        if previous is None:
            return
        storage = storage_for(version.storage_kind)
        local = storage.local_path(key=version.file_key(path))
        if local is not None:
            local.unlink(missing_ok=True)
        else:
            storage.delete(prefix=version.file_key(path))
        DatasetVersion.objects.filter(pk=locked.pk).update(
            size_bytes=F("size_bytes") - previous.size, file_count=F("file_count") - 1
        )
        previous.delete()


# -- registering a directory -------------------------------------------------------------------


def _walk_regular_files(top_fd: int) -> list[tuple[str, int]]:
    """(relative path, size) of the regular files below the open directory `top_fd`, walked
    by the one reader of tenants' trees (apps/identity/tree.py): a symlink, a special file,
    a file with other hard links or a name a version cannot hold is refused, naming it."""
    found = []
    try:
        for entry in tree.walk_files(top_fd, links="refuse", special="refuse"):
            if entry.nlink > 1:  # a hard link may name a file from anywhere
                raise ValidationError(
                    {"path": [f"{entry.relative} has other hard links; copy it first."]}
                )
            problem = file_path_problem(entry.relative)
            if problem:
                raise ValidationError({"path": [f"{entry.relative}: {problem}"]})
            found.append((entry.relative, entry.size))
    except tree.TreeRefused as exc:
        raise ValidationError({"path": [f"{exc}."]}) from None
    except OSError as exc:
        raise ValidationError(
            {"path": [f"{exc.filename}: cannot be read ({exc.strerror})."]}
        ) from None
    return sorted(found)


def _open_file(top_fd: int, relative: str) -> int:
    """One listed file, opened again below `top_fd` with no link followed: changed into a link
    or hard-linked since the listing, it is refused."""
    try:
        fd = tree.open_beneath(top_fd, relative)
    except OSError as exc:
        raise ValidationError({"path": [f"{relative}: {exc.strerror or exc}."]}) from None
    if os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise ValidationError({"path": [f"{relative} has other hard links; copy it first."]})
    return fd


def version_register_directory(
    *, actor: Actor | None, version: DatasetVersion, path: str
) -> DatasetVersion:
    """Copy the files of a directory in the project's tree into an open version, hashing
    them as they stream. The directory must lie inside the project's tree, and is opened from
    the tenant's root with no link followed on the way or below it (apps/identity/tree.py)."""
    dataset = version.dataset
    problem = source_dir_problem(path, project=dataset.project)
    if problem:
        raise ValidationError({"path": [problem]})
    try:
        top_fd = tree.open_under(tenant_root(dataset.project.tenant), path, directory=True)
    except tree.TreeRefused as exc:
        raise ValidationError({"path": [f"{exc}."]}) from None
    except OSError as exc:
        raise ValidationError({"path": [f"Cannot be opened ({exc.strerror})."]}) from None
    try:
        files = _walk_regular_files(top_fd)
        tenant_id, project_id = _tenant_project(version)
        with transaction.atomic():
            locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
            _check_open(locked)
            for relative, _size in files:
                _check_no_clash(locked, relative)
            storage_admit(
                tenant_id=tenant_id, project_id=project_id, add_bytes=sum(s for _, s in files)
            )
        storage = storage_for(version.storage_kind)
        for relative, _size in files:
            key = version.file_key(relative)
            fd = _open_file(top_fd, relative)
            upload_id = storage.begin_upload(key=key)
            try:
                try:
                    hashed = tree.HashedChunks(fd, name=relative)
                    storage.append(key=key, upload_id=upload_id, offset=0, chunks=hashed)
                finally:
                    os.close(fd)
                with transaction.atomic():
                    locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
                    _check_open(locked)
                    storage.finish_upload(key=key, upload_id=upload_id)
                    _file_record(locked, path=relative, size=hashed.size, sha256=hashed.hexdigest)
            except BaseException:
                storage.abort_upload(key=key, upload_id=upload_id)
                raise
    finally:
        os.close(top_fd)
    _audit(
        actor,
        tenant_id=dataset.tenant_id,
        action="dataset.version.register",
        target=version,
        changes={"path": [None, path], "files": [None, len(files)]},
    )
    version.refresh_from_db()
    return version


# -- commit ------------------------------------------------------------------------------------


def manifest_digest(lines: Iterable[tuple[str, int, str]]) -> str:
    """sha256 of the sorted manifest, one 'path\\tsize\\tsha256\\n' line per file."""
    digest = hashlib.sha256()
    for path, size, sha256 in sorted(lines):
        digest.update(f"{path}\t{size}\t{sha256}\n".encode())
    return digest.hexdigest()


def version_commit(*, actor: Actor | None, version: DatasetVersion) -> DatasetVersion:
    """Make an open version immutable: its manifest fixed, its files sealed. Two commits at
    once: the row lock lets one through; the other finds it committed (409)."""
    tenant_id, project_id = _tenant_project(version)
    with transaction.atomic():
        locked = (
            DatasetVersion.objects.select_for_update()
            .select_related("dataset__project__tenant")
            .get(pk=version.pk)
        )
        _check_open(locked)
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
        _audit(
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
        _check_open(locked)
        storage = storage_for(locked.storage_kind)
        for upload in locked.uploads.all():
            storage.abort_upload(key=locked.file_key(upload.path), upload_id=upload.upload_id)
        storage.delete(prefix=version.storage_prefix)
        _audit(
            actor,
            tenant_id=version.dataset.tenant_id,
            action="dataset.version.discard",
            target=locked,
        )
        locked.delete()
