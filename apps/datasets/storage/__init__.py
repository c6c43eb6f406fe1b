"""Storage backends for datasets and model artifacts: `storage_for(kind)` is the one way in."""

from functools import cache

from apps.datasets.storage.base import Storage


@cache
def storage_for(kind: str) -> Storage:
    """The backend for a version's storage kind ("posix" or "s3")."""
    if kind == "posix":
        from apps.datasets.storage.posix import PosixStorage

        return PosixStorage()
    if kind == "s3":
        from apps.datasets.storage.s3 import S3Storage

        return S3Storage()
    raise ValueError(f"unknown storage kind {kind!r}")
