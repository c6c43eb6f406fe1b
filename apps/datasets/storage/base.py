"""The storage interface datasets and model artifacts are written through.

Everything works on *keys*: relative, '/'-separated paths that callers have validated
(`check_key`), such as

    <tenant slug>/<project slug>/datasets/<dataset id>/v<number>/<file path>
    <tenant slug>/<project slug>/models/<model id>/v<number>/<file path>

A file is written by an upload (begin, append chunks at the stored offset, finish), which
survives a dropped connection: the caller asks `upload_size` and continues from there.
Readers stream (`open`); nothing here holds a whole file in memory. After a version is
committed its prefix is `seal`ed: it can be read and deleted, never written again.
"""

import abc
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

# A chunk size every backend reads and writes in (bounded memory).
CHUNK_BYTES = 1024 * 1024

_BAD_PART = re.compile(r"[\x00-\x1f\x7f\\]")


class StorageError(Exception):
    """The backend refused or failed (disk full, permission, network): nothing was recorded
    as done; the caller may try again."""


class UploadOffsetMismatch(StorageError):
    """An append did not start at the stored size; `.stored` says where to continue."""

    def __init__(self, *, stored: int, offset: int):
        super().__init__(f"the upload holds {stored} bytes; an append at {offset} was refused")
        self.stored = stored
        self.offset = offset


class Sealed(StorageError):
    """A write to a sealed (committed) prefix."""


def key_problem(key: str) -> str | None:
    """Why `key` is not a valid storage key, or None: relative, '/'-separated, no empty,
    '.' or '..' parts, no backslash, NUL or control characters."""
    if not key or len(key) > 4096:
        return "Must be between 1 and 4096 characters."
    if key.startswith("/"):
        return "Must be relative."
    for part in key.split("/"):
        if part in ("", ".", ".."):
            return "Must not contain empty, '.' or '..' parts."
        if _BAD_PART.search(part):
            return "Must not contain backslashes or control characters."
    return None


def check_key(key: str) -> str:
    problem = key_problem(key)
    if problem:
        raise ValueError(f"invalid storage key {key!r}: {problem}")
    return key


class Storage(abc.ABC):
    """One backend (POSIX tree, S3 bucket). All methods are keyword-only; keys and prefixes
    are validated with `check_key` by every implementation before use."""

    kind: str = ""

    # -- writing: resumable uploads -------------------------------------------------------------

    @abc.abstractmethod
    def begin_upload(self, *, key: str) -> str:
        """Start (or restart from zero) an upload of `key`; returns an opaque upload id."""

    @abc.abstractmethod
    def upload_size(self, *, key: str, upload_id: str) -> int:
        """How many bytes the upload holds durably: where the next append must start."""

    @abc.abstractmethod
    def append(self, *, key: str, upload_id: str, offset: int, chunks: Iterable[bytes]) -> int:
        """Write `chunks` at `offset`, which must equal `upload_size` (UploadOffsetMismatch
        otherwise). Returns the new stored size. Bytes written before an error in `chunks`
        stay stored (the client resumes from `upload_size`)."""

    @abc.abstractmethod
    def finish_upload(self, *, key: str, upload_id: str) -> None:
        """Make the uploaded bytes the content of `key` (replacing a previous content)."""

    @abc.abstractmethod
    def abort_upload(self, *, key: str, upload_id: str) -> None:
        """Forget an unfinished upload and its bytes (no error if it is gone)."""

    @abc.abstractmethod
    def put_file(self, *, key: str, source: Path) -> None:
        """Store the local file `source` as `key`, streaming it."""

    # -- reading --------------------------------------------------------------------------------

    @abc.abstractmethod
    def open(self, *, key: str) -> BinaryIO:
        """A binary, seekable-if-possible stream of the content of `key` (FileNotFoundError
        when there is none). The caller closes it."""

    @abc.abstractmethod
    def stat(self, *, key: str) -> int | None:
        """The size of `key` in bytes, or None when it does not exist."""

    @abc.abstractmethod
    def list(self, *, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every stored file under `prefix` (a directory-like key), sorted by
        key; unfinished uploads are not listed."""

    # -- lifecycle ------------------------------------------------------------------------------

    @abc.abstractmethod
    def delete(self, *, prefix: str) -> None:
        """Remove every file and unfinished upload under `prefix` (sealed or not)."""

    @abc.abstractmethod
    def seal(self, *, prefix: str) -> None:
        """Make `prefix` read-only: later writes under it raise Sealed."""

    # -- where the bytes are --------------------------------------------------------------------

    @abc.abstractmethod
    def local_path(self, *, key: str) -> Path | None:
        """The file's path on the shared filesystem (jobs read it in place), or None when the
        backend has no such path (S3)."""

    @abc.abstractmethod
    def download_url(self, *, key: str, expires_s: int) -> str | None:
        """A time-limited URL a client may GET the file from directly (S3: presigned), or None
        when downloads go through the API (POSIX)."""
