"""Datasets and model files on the shared filesystem, in the per-tenant tree.

A key `<tenant>/<project>/<datasets|models>/...` is the path under settings.TORUS_JOB_ROOT.
`<project>/datasets` and `<project>/models` are made by the privileged helper
(apps/identity/storage.py) owned by the platform account with the project's group, setgid,
2750; everything below is written by the platform account (the web process), directories
2750 and files 0640, so the project's jobs read them through the group and nobody else can.
Unfinished uploads live in `<project>/<kind>/.uploads/<upload id>` on the same filesystem
and are renamed into place. A sealed prefix loses its write bits; writes below a directory
without them are refused.
"""

import contextlib
import fcntl
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

from apps.datasets.storage.base import (
    CHUNK_BYTES,
    Sealed,
    Storage,
    StorageError,
    UploadOffsetMismatch,
    check_key,
)

FILE_MODE = 0o640
DIR_MODE = 0o2750
_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")


@cache
def _platform_uid() -> int | None:
    import pwd

    try:
        return pwd.getpwnam(settings.TORUS_SERVICE_USER).pw_uid
    except KeyError:
        return None


def _own(path: Path) -> None:
    """Run as root (tests; the portal's processes are the platform account and own what they
    make), hand what was made to the platform account; the group comes from the setgid parent."""
    if os.geteuid() == 0 and (uid := _platform_uid()) is not None:
        os.chown(path, uid, -1, follow_symlinks=False)


class PosixStorage(Storage):
    kind = "posix"

    @property
    def root(self) -> Path:
        return Path(settings.TORUS_JOB_ROOT)

    # -- paths ----------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        check_key(key)
        if len(key.split("/")) < 3:
            raise ValueError(f"storage key {key!r} must start with <tenant>/<project>/<kind>")
        path = self.root / key
        # keys are validated, so this only guards against symlinks planted in the tree
        real = Path(os.path.realpath(path))
        if not real.is_relative_to(os.path.realpath(self.root)):
            raise StorageError(f"{key} resolves outside the storage root")
        return path

    def _area(self, key: str) -> Path:
        """`<tenant>/<project>/<kind>`: made through the privileged helper, never here."""
        area = self.root.joinpath(*key.split("/")[:3])
        if not area.is_dir():
            raise StorageError(f"{area} does not exist (the project's storage is not set up)")
        return area

    def _upload_path(self, key: str, upload_id: str) -> Path:
        if not _UPLOAD_ID.match(upload_id or ""):
            raise ValueError("invalid upload id")
        return self._area(key) / ".uploads" / upload_id

    def _check_writable(self, path: Path) -> None:
        """Refuse writes below a sealed directory (even for root, who ignores the bits)."""
        area = self._area(str(path.relative_to(self.root)))
        current = path.parent
        while current != area and current.is_relative_to(area):
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                current = current.parent
                continue
            if not mode & stat.S_IWUSR:
                raise Sealed(f"{current.relative_to(self.root)} is sealed")
            current = current.parent

    def _makedirs(self, path: Path) -> None:
        """Make the missing directories between the storage area and `path`."""
        area = self._area(str(path.relative_to(self.root)))
        missing = []
        current = path
        while current != area and not current.is_dir():
            missing.append(current)
            current = current.parent
        for directory in reversed(missing):
            try:
                os.mkdir(directory, DIR_MODE)
            except FileExistsError:
                if directory.is_symlink() or not directory.is_dir():
                    raise StorageError(f"{directory} exists and is not a directory") from None
                continue
            except OSError as exc:
                raise StorageError(f"cannot make {directory}: {exc.strerror}") from exc
            # only when mkdir's mode is short (a umask): the platform account, outside the
            # project's group, drops the inherited setgid with any chmod, and the files below
            # would then land in its own group, out of the project's jobs' reach
            if stat.S_IMODE(os.lstat(directory).st_mode) != DIR_MODE:
                os.chmod(directory, DIR_MODE)
            _own(directory)

    # -- uploads --------------------------------------------------------------------------------

    def begin_upload(self, *, key: str) -> str:
        path = self._path(key)
        self._check_writable(path)
        upload_id = uuid.uuid4().hex
        upload = self._upload_path(key, upload_id)
        self._makedirs(upload.parent)
        fd = os.open(upload, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        os.close(fd)
        _own(upload)
        return upload_id

    def upload_size(self, *, key: str, upload_id: str) -> int:
        try:
            return os.stat(self._upload_path(key, upload_id)).st_size
        except FileNotFoundError:
            raise StorageError(f"no upload {upload_id} for {key}") from None

    def append(self, *, key: str, upload_id: str, offset: int, chunks: Iterable[bytes]) -> int:
        upload = self._upload_path(key, upload_id)
        try:
            fd = os.open(upload, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise StorageError(f"no upload {upload_id} for {key}") from None
        try:
            try:  # one writer at a time: a second request for the same upload is refused
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UploadOffsetMismatch(stored=os.fstat(fd).st_size, offset=offset) from None
            stored = os.fstat(fd).st_size
            if stored != offset:
                raise UploadOffsetMismatch(stored=stored, offset=offset)
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                    stored += written
            return stored
        except OSError as exc:
            raise StorageError(f"writing {key}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def finish_upload(self, *, key: str, upload_id: str) -> None:
        path = self._path(key)
        self._check_writable(path)
        upload = self._upload_path(key, upload_id)
        self._makedirs(path.parent)
        try:
            os.replace(upload, path)
        except FileNotFoundError:
            raise StorageError(f"no upload {upload_id} for {key}") from None

    def abort_upload(self, *, key: str, upload_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._upload_path(key, upload_id))

    def put_file(self, *, key: str, source: Path) -> None:
        upload_id = self.begin_upload(key=key)
        try:
            with open(source, "rb") as src:
                self.append(
                    key=key,
                    upload_id=upload_id,
                    offset=0,
                    chunks=iter(lambda: src.read(CHUNK_BYTES), b""),
                )
            self.finish_upload(key=key, upload_id=upload_id)
        except BaseException:
            self.abort_upload(key=key, upload_id=upload_id)
            raise

    # -- reading --------------------------------------------------------------------------------

    def open(self, *, key: str) -> BinaryIO:
        path = self._path(key)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        return os.fdopen(fd, "rb", buffering=CHUNK_BYTES)

    def stat(self, *, key: str) -> int | None:
        try:
            info = os.lstat(self._path(key))
        except FileNotFoundError:
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    def list(self, *, prefix: str) -> Iterator[tuple[str, int]]:
        base = self._path(prefix)
        found = []
        for directory, dirs, files in os.walk(base):  # does not follow symlinked directories
            dirs.sort()
            for name in files:
                path = Path(directory) / name
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode):
                    found.append((str(path.relative_to(self.root)), info.st_size))
        yield from sorted(found)

    # -- lifecycle ------------------------------------------------------------------------------

    def delete(self, *, prefix: str) -> None:
        base = self._path(prefix)
        if not base.exists():
            return
        for directory, _dirs, _files in os.walk(base):
            os.chmod(directory, DIR_MODE)  # unseal, so the files can go
        shutil.rmtree(base)

    def seal(self, *, prefix: str) -> None:
        base = self._path(prefix)
        if not base.is_dir():
            return
        for directory, _dirs, files in os.walk(base, topdown=False):
            for name in files:
                path = Path(directory) / name
                if not path.is_symlink():
                    os.chmod(path, 0o440)
            os.chmod(directory, 0o2550)  # noqa: S103 (read-only for the group, as before)

    # -- where the bytes are --------------------------------------------------------------------

    def local_path(self, *, key: str) -> Path | None:
        return self._path(key)

    def download_url(self, *, key: str, expires_s: int) -> str | None:
        return None
