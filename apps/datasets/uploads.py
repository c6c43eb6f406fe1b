"""A dataset version's files uploaded in streamed, resumable appends: where an upload stands,
each append (quota checked, hashed on the way), the finish that adds the manifest line, and
an abort."""

import hashlib
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.actor import Actor
from apps.datasets.errors import DatasetConflict
from apps.datasets.manifest import (
    check_no_clash,
    check_open,
    checked_path,
    file_record,
    tenant_project,
)
from apps.datasets.models import DatasetFile, DatasetUpload, DatasetVersion
from apps.datasets.storage import storage_for
from apps.datasets.storage.base import CHUNK_BYTES, StorageError, UploadOffsetMismatch
from apps.datasets.versions import actor_user
from apps.quotas.services import storage_admit


@dataclass
class UploadState:
    path: str
    offset: int
    complete: bool
    file: DatasetFile | None = None


def upload_state(*, version: DatasetVersion, path: str) -> UploadState:
    """Where an upload of `path` stands: the bytes stored (resume from there), or complete."""
    checked_path(path)
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
    checked_path(path)
    if offset < 0 or total < 0 or length < 0 or offset + length > total:
        raise ValidationError({"offset": ["offset + Content-Length must not pass total."]})
    storage = storage_for(version.storage_kind)
    key = version.file_key(path)
    tenant_id, project_id = tenant_project(version)
    with transaction.atomic():
        locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
        check_open(locked)
        upload = DatasetUpload.objects.filter(version=locked, path=path).first()
        if upload is None:
            check_no_clash(locked, path)
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
                created_by=actor_user(actor),
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
        check_open(locked)
        file = file_record(locked, path=upload.path, size=size, sha256=sha256)
        upload.delete()
    return UploadState(path=upload.path, offset=size, complete=True, file=file)


def upload_abort(*, version: DatasetVersion, path: str) -> None:
    """Drop an unfinished upload of `path` and its bytes."""
    checked_path(path)
    upload = DatasetUpload.objects.filter(version=version, path=path).first()
    if upload is None:
        return
    storage_for(version.storage_kind).abort_upload(
        key=version.file_key(path), upload_id=upload.upload_id
    )
    upload.delete()
