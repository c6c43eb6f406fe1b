"""Reads for datasets, always scoped to the actor; and what the storage quota counts."""

import hashlib
import tarfile
from collections.abc import Iterator

from django.db.models import Sum

from apps.datasets.models import DatasetFile, DatasetUpload, DatasetVersion
from apps.datasets.storage import storage_for
from apps.datasets.storage.base import CHUNK_BYTES


def version_compare(*, old: DatasetVersion, new: DatasetVersion) -> dict:
    """Files added, removed and changed (by sha256) from `old` to `new`."""
    before = dict(old.files.values_list("path", "sha256"))
    after = dict(new.files.values_list("path", "sha256"))
    return {
        "added": sorted(set(after) - set(before)),
        "removed": sorted(set(before) - set(after)),
        "changed": sorted(p for p in set(before) & set(after) if before[p] != after[p]),
        "unchanged": sum(1 for p in set(before) & set(after) if before[p] == after[p]),
    }


def version_verify(*, version: DatasetVersion) -> dict:
    """Read every file back and compare it with the manifest: missing, changed (size or
    sha256), and files in storage the manifest does not list."""
    storage = storage_for(version.storage_kind)
    missing, changed = [], []
    listed = set()
    for file in version.files.order_by("path").iterator():
        key = version.file_key(file.path)
        listed.add(key)
        size = storage.stat(key=key)
        if size is None:
            missing.append(file.path)
            continue
        if size != file.size:
            changed.append(file.path)
            continue
        digest = hashlib.sha256()
        with storage.open(key=key) as stream:
            while chunk := stream.read(CHUNK_BYTES):
                digest.update(chunk)
        if digest.hexdigest() != file.sha256:
            changed.append(file.path)
    prefix = version.storage_prefix + "/"
    unexpected = [
        key[len(prefix) :]
        for key, _ in _listing(storage, version.storage_prefix)
        if key not in listed
    ]
    return {
        "ok": not (missing or changed or unexpected),
        "checked": len(listed),
        "missing": missing,
        "changed": changed,
        "unexpected": unexpected,
    }


def _listing(storage, prefix: str):
    try:
        yield from storage.list(prefix=prefix)
    except FileNotFoundError:
        return


def storage_bytes_by_project(*, tenant_ids: list) -> dict[tuple, int]:
    """What the storage quota counts for datasets: every version's files (open or committed)
    and the bytes of unfinished uploads, per (tenant id, project id)."""
    used: dict[tuple, int] = {}
    versions = (
        DatasetVersion.objects.filter(dataset__tenant_id__in=tenant_ids)
        .values("dataset__tenant_id", "dataset__project_id")
        .annotate(total=Sum("size_bytes"))
    )
    uploads = (
        DatasetUpload.objects.filter(version__dataset__tenant_id__in=tenant_ids)
        .values("version__dataset__tenant_id", "version__dataset__project_id")
        .annotate(total=Sum("received"))
    )
    for row in versions:
        key = (row["dataset__tenant_id"], row["dataset__project_id"])
        used[key] = used.get(key, 0) + (row["total"] or 0)
    for row in uploads:
        key = (row["version__dataset__tenant_id"], row["version__dataset__project_id"])
        used[key] = used.get(key, 0) + (row["total"] or 0)
    return used


# -- reading files -----------------------------------------------------------------------------


def file_chunks(*, version: DatasetVersion, path: str, start: int = 0, end: int | None = None):
    """The bytes [start, end] of one file, in pieces (the file is opened at the first)."""
    storage = storage_for(version.storage_kind)
    stream = storage.open(key=version.file_key(path))
    try:
        if start:
            stream.seek(start)
        left = None if end is None else end - start + 1
        while left is None or left > 0:
            chunk = stream.read(CHUNK_BYTES if left is None else min(CHUNK_BYTES, left))
            if not chunk:
                break
            if left is not None:
                left -= len(chunk)
            yield chunk
    finally:
        stream.close()


def archive_chunks(*, version: DatasetVersion, files: list[DatasetFile]) -> Iterator[bytes]:
    """A tar of the version's files, produced piece by piece (never built in memory): each
    member's header, its bytes streamed from storage, padding; then the end marker."""
    root = f"{version.dataset.name}-v{version.number}"
    mtime = int((version.committed_at or version.created_at).timestamp())
    for file in files:
        info = tarfile.TarInfo(f"{root}/{file.path}")
        info.size, info.mode, info.mtime = file.size, 0o644, mtime
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        sent = 0
        for chunk in file_chunks(version=version, path=file.path):
            if sent + len(chunk) > file.size:  # the file grew since: keep the archive valid
                chunk = chunk[: file.size - sent]
            sent += len(chunk)
            yield chunk
            if sent >= file.size:
                break
        if sent < file.size:
            raise OSError(f"{file.path} is shorter than its manifest says")
        if file.size % tarfile.BLOCKSIZE:
            yield b"\0" * (tarfile.BLOCKSIZE - file.size % tarfile.BLOCKSIZE)
    yield b"\0" * (tarfile.BLOCKSIZE * 2)


def archive_size(*, version: DatasetVersion, files: list[DatasetFile]) -> int:
    """The exact length of archive_chunks' output (for Content-Length)."""
    root = f"{version.dataset.name}-v{version.number}"
    total = tarfile.BLOCKSIZE * 2
    for file in files:
        info = tarfile.TarInfo(f"{root}/{file.path}")
        info.size, info.mode = file.size, 0o644
        info.mtime = int((version.committed_at or version.created_at).timestamp())
        total += len(info.tobuf(format=tarfile.PAX_FORMAT))
        total += -(-file.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    return total
