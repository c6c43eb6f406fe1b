"""The local staging of an S3 multipart upload (apps/datasets/storage/s3.py): the tail files
that fill to a part's size on disk, their lock against a concurrent append or finish, and the
sender of full parts (one in flight).

Uploads are S3 multipart uploads; the multipart upload id is the storage upload id. Parts
must be at least 5 MiB except the last, while a client appends in whatever chunks it sends,
so appended bytes go first to a tail file on local disk (settings.TORUS_S3_STAGING_DIR,
`<sha256 of bucket, key, upload id>/tail-<n>`); once it holds TORUS_S3_PART_BYTES it is sent
as part n in a thread while tail-<n+1> fills (one part in flight), and removed once S3 has
it. The stored size is the parts S3 lists plus the staged tails of the parts it lacks: the
resume state lives in S3 (upload id, part list) and on disk, never in memory. A tail whose
part S3 already lists (a crash between the two steps) is stale and dropped. Resuming must
reach a process that sees the same staging directory (one web machine, or a shared dir).
"""

import contextlib
import fcntl
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from django.conf import settings

from apps.datasets.storage.base import StorageError

MIN_PART_BYTES = 5 * 1024 * 1024


def own(path: Path) -> None:
    """Run as root (tests; the portal's processes are the platform account), give what it
    made in the staging directory to that directory's owner (the platform account)."""
    if os.geteuid() == 0:
        info = Path(settings.TORUS_S3_STAGING_DIR).stat()
        os.chown(path, info.st_uid, info.st_gid, follow_symlinks=False)


class PartSender:
    """Sends full parts in a thread while the caller fills the next one: at most one part in
    flight, so at most two wait on disk. A part's file goes once S3 has it. Leaving the block
    waits for the part in flight (also after an error), so a resumed upload finds either the
    part in S3 or its file on disk."""

    def __init__(self, send_part: Callable[[int, Path], dict]):
        self._send_part = send_part
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="s3-part")
        self._in_flight: tuple[Future, Path] | None = None

    def send(self, number: int, path: Path) -> None:
        self.wait()
        future = self._pool.submit(self._send_part, number, path)
        self._in_flight = (future, path)

    def wait(self) -> None:
        if self._in_flight is not None:
            future, path = self._in_flight
            self._in_flight = None
            future.result()
            path.unlink(missing_ok=True)

    def __enter__(self) -> "PartSender":
        return self

    def __exit__(self, kind, error, trace) -> None:
        try:
            if kind is None:
                self.wait()
            elif self._in_flight is not None:
                # the first error is the one to report; this part's fate shows in S3
                with contextlib.suppress(Exception):
                    self.wait()
        finally:
            self._pool.shutdown(wait=True)


@contextlib.contextmanager
def locked(directory: Path, *, key: str):
    """The upload's staging directory, locked against a concurrent append or finish."""
    root = Path(settings.TORUS_S3_STAGING_DIR)
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        own(directory)
        fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        own(directory / "lock")
    except OSError as exc:
        raise StorageError(f"staging for {key}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield directory
    finally:
        os.close(fd)


def tails(directory: Path, parts: list[dict]) -> list[tuple[int, Path]]:
    """The staged parts S3 does not have yet, in order: (number, file) from part
    len(parts)+1 on, every one full but the last. Tails of parts S3 already lists (a crash
    between sending a part and removing its file) are stale and dropped."""
    following = len(parts) + 1
    tails = []
    for path in directory.glob("tail-*"):
        number = path.name.removeprefix("tail-")
        if number.isdigit() and int(number) >= following:
            tails.append((int(number), path))
        else:
            path.unlink(missing_ok=True)
    tails.sort()
    if [number for number, _ in tails] != list(range(following, following + len(tails))):
        raise StorageError(f"the staged parts in {directory} have a gap")
    return tails


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def open_tail(key: str, tail: Path):
    try:
        out = open(tail, "ab", buffering=0)  # noqa: SIM115 (closed by the caller)
        own(tail)
        return out
    except OSError as exc:
        raise StorageError(f"staging {key}: {exc.strerror}") from exc


def write(key: str, out, piece: memoryview) -> int:
    """Write all of `piece` to the unbuffered tail file; returns its length."""
    done = 0
    try:
        while done < len(piece):
            done += out.write(piece[done:])
    except OSError as exc:
        raise StorageError(f"staging {key}: {exc.strerror}") from exc
    return done


def part_bytes() -> int:
    return max(int(settings.TORUS_S3_PART_BYTES), MIN_PART_BYTES)
