"""Reading a tenant's tree: the one way the platform opens, walks, copies and reads what jobs
and people wrote under a trusted root (docs/security.md, "Reading a tenant's tree").

A trusted root is a directory no tenant can replace: the job root, a tenant's root (both
root-owned, in root-owned parents) or a node's dataset cache directory. It is opened by path.
Everything below it is resolved from its descriptor, never by a path string:
`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, or where the kernel
or a seccomp filter refuses that system call, one component at a time with `O_NOFOLLOW`
(`O_DIRECTORY` for directories). A symbolic link anywhere below the root, a `..` part or an
absolute relative part is refused (`TreeRefused`): a link a job planted cannot lead the
platform into the machine or into another tenant's tree, whatever uid the platform runs as.

Callers: model registration (apps/registry/trees.py), dataset registration and inference
outputs (apps/datasets/directories.py, apps/jobs/inference.py), the node cache's sweeps
(apps/jobs/node_cache.py), checkpoints and exit files (apps/jobs/paths.py), stager reports
(apps/jobs/staging.py), attempt logs (apps/compute/backends/base.py FileLogSource) and
replicas' serve.json and stderr (apps/serving/replicas.py).
"""

import ctypes
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

CHUNK_BYTES = 1024 * 1024
MAX_DEPTH = 64  # directories below a walked top (each open level holds one descriptor)

_SYS_OPENAT2 = 437  # the same number on every architecture Linux gives it to
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_BASE = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
_DIR = _BASE | os.O_DIRECTORY
_FILE = _BASE | os.O_NONBLOCK  # a fifo a job left does not block the reader


class TreeRefused(OSError):
    """A path of a tenant's tree the platform will not read: `path` names the offending
    entry (a symbolic link, a `..` part, a file over a limit...), `reason` says why."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path} {reason}")
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"{self.path} {self.reason}"


LINK = "is a symbolic link (links in a tenant's tree are not followed)"


# -- opening beneath a root ------------------------------------------------------------------


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_openat2_missing = False  # ENOSYS once: the kernel has none, every call walks by hand


def _openat2(dir_fd: int, relative: str, flags: int) -> int:
    """openat2 beneath `dir_fd` with no link followed; -errno on failure."""
    how = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(relative)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    return fd if fd >= 0 else -ctypes.get_errno()


def parts_of(relative: str | os.PathLike) -> list[str]:
    """The components of a path relative to a root: '' and '.' are the root itself; an
    absolute path, a `..` part or a NUL is refused."""
    text = os.fspath(relative)
    if "\x00" in text:
        raise TreeRefused(repr(text), "contains a NUL byte")
    if text.startswith("/"):
        raise TreeRefused(text, "is absolute where a path below a root is expected")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise TreeRefused(text, "has a '..' part")
    return parts


def _shown(base: str, parts: list[str]) -> str:
    tail = "/".join(parts)
    return f"{base.rstrip('/')}/{tail}" if base else tail or "."


def _walk_open(root_fd: int, parts: list[str], *, directory: bool, base: str) -> int:
    """The same as openat2's answer, one component at a time from `root_fd` (not closed)."""
    fd = root_fd
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = _DIR if directory or not last else _FILE
            try:
                opened = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                shown = _shown(base, parts[: index + 1])
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    try:
                        kind = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                    except OSError:
                        kind = 0
                    if stat.S_ISLNK(kind):
                        raise TreeRefused(shown, LINK) from None
                raise OSError(exc.errno, exc.strerror, shown) from None
            if fd != root_fd:
                os.close(fd)
            fd = opened
        return fd if fd != root_fd else os.dup(root_fd)
    except BaseException:
        if fd != root_fd:
            os.close(fd)
        raise


def _checked(fd: int, *, directory: bool, shown: str) -> int:
    """The opened descriptor is what was asked for: a directory, or a regular file."""
    if directory:
        return fd
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
    raise TreeRefused(shown, "is not a regular file")


def open_beneath(
    root: int | str | os.PathLike,
    relative: str | os.PathLike,
    *,
    directory: bool = False,
) -> int:
    """A new descriptor (O_RDONLY, close-on-exec) of `relative` below `root` (a descriptor of
    a trusted root, or its path), no link followed anywhere below the root: a directory
    when `directory`, else a regular file. TreeRefused for a link, a `..` part, an absolute
    `relative` or a file that is not regular; the usual OSError (FileNotFoundError,
    PermissionError, NotADirectoryError, IsADirectoryError) otherwise."""
    global _openat2_missing
    parts = parts_of(relative)
    owned = not isinstance(root, int)
    root_fd, base = (open_root(root), os.fspath(root)) if owned else (root, "")
    shown = _shown(base, parts)
    try:
        if not parts:
            if not directory:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
            return os.dup(root_fd)
        flags = _DIR if directory else _FILE
        result = -errno.ENOSYS
        for _ in range(3):  # EAGAIN: a rename raced the lookup
            if _openat2_missing:
                break
            result = _openat2(root_fd, "/".join(parts), flags)
            if result != -errno.EAGAIN:
                break
        if result >= 0:
            return _checked(result, directory=directory, shown=shown)
        code = -result
        if code == errno.ENOSYS:
            _openat2_missing = True
        if code == errno.EXDEV:
            raise TreeRefused(shown, "leads outside its root")
        if code in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG, errno.EAGAIN):
            fd = _walk_open(root_fd, parts, directory=directory, base=base)
            return _checked(fd, directory=directory, shown=shown)
        if code in (errno.ELOOP, errno.ENOTDIR):
            # name the component that is a link (the walk finds it), else the kernel's word
            fd = _walk_open(root_fd, parts, directory=directory, base=base)
            os.close(fd)  # swapped back meanwhile: refused all the same
            raise TreeRefused(shown, "passes through a symbolic link")
        raise OSError(code, os.strerror(code), shown)
    finally:
        if owned:
            os.close(root_fd)


def open_root(root: str | os.PathLike) -> int:
    """A descriptor of a trusted root, opened by its path (it is the caller's promise that
    no tenant can replace it: root-owned, in root-owned parents)."""
    return os.open(root, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)


def relative_to_root(root: str | os.PathLike, path: str | os.PathLike) -> str:
    """`path` (absolute) as a path below `root`, compared as written (no link resolved):
    TreeRefused when it does not lie there or has a `..` part."""
    text = os.fspath(path)
    if not text.startswith("/"):
        raise TreeRefused(text, "is not an absolute path")
    candidate, base = PurePosixPath(text), PurePosixPath(os.fspath(root))
    if ".." in candidate.parts:
        raise TreeRefused(text, "has a '..' part")
    try:
        return str(candidate.relative_to(base))
    except ValueError:
        raise TreeRefused(text, f"does not lie below {base}") from None


def open_under(root: str | os.PathLike, path: str | os.PathLike, *, directory: bool = False) -> int:
    """`open_beneath` for an absolute `path` that must lie below the trusted `root`."""
    return open_beneath(root, relative_to_root(root, path), directory=directory)


@contextmanager
def opened(
    root: int | str | os.PathLike,
    path: str | os.PathLike,
    *,
    directory: bool = False,
) -> Iterator[int]:
    """open_beneath (a relative `path`) or open_under (an absolute one), closed on exit."""
    text = os.fspath(path)
    if text.startswith("/") and not isinstance(root, int):
        fd = open_under(root, text, directory=directory)
    else:
        fd = open_beneath(root, text, directory=directory)
    try:
        yield fd
    finally:
        os.close(fd)


# -- reading files ---------------------------------------------------------------------------


def read_small(root: int | str | os.PathLike, path: str | os.PathLike, *, limit: int) -> bytes:
    """The whole of a small regular file (an exit status, serve.json, a marker): TreeRefused
    when it holds more than `limit` bytes."""
    with opened(root, path) as fd:
        data = os.read(fd, limit + 1)
    if len(data) > limit:
        raise TreeRefused(os.fspath(path), f"holds more than {limit} bytes")
    return data


def read_at(fd: int, *, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes from `offset` of an open file (fewer only at its end)."""
    parts, got = [], 0
    while got < limit:
        chunk = os.pread(fd, min(limit - got, CHUNK_BYTES), offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_range(
    root: int | str | os.PathLike, path: str | os.PathLike, *, offset: int, limit: int
) -> bytes:
    """Up to `limit` bytes of a regular file from `offset` (a log read by offsets)."""
    with opened(root, path) as fd:
        return read_at(fd, offset=offset, limit=limit)


def read_tail(root: int | str | os.PathLike, path: str | os.PathLike, *, max_bytes: int) -> bytes:
    """The last `max_bytes` bytes of a regular file."""
    with opened(root, path) as fd:
        size = os.fstat(fd).st_size
        return read_at(fd, offset=max(0, size - max_bytes), limit=max_bytes)


def file_size(root: int | str | os.PathLike, path: str | os.PathLike) -> int:
    with opened(root, path) as fd:
        return os.fstat(fd).st_size


class HashedChunks:
    """The chunks of an open file, hashed (sha256) and counted as they pass; TreeRefused once
    more than `limit` bytes came (a file still growing is cut off, not copied whole)."""

    def __init__(self, fd: int, *, name: str = "", limit: int | None = None, over: str = ""):
        self.fd, self.name, self.limit = fd, name, limit
        self.over = over or f"is larger than {limit} bytes"
        self.digest, self.size = hashlib.sha256(), 0

    def __iter__(self) -> Iterator[bytes]:
        while chunk := os.read(self.fd, CHUNK_BYTES):
            self.size += len(chunk)
            if self.limit is not None and self.size > self.limit:
                raise TreeRefused(self.name, self.over)
            self.digest.update(chunk)
            yield chunk

    @property
    def hexdigest(self) -> str:
        return self.digest.hexdigest()


# -- walking a directory ---------------------------------------------------------------------


def entries(dir_fd: int) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of what an open directory holds, sorted by name; links are listed as
    links (S_ISLNK), never followed. An entry gone meanwhile is left out."""
    found = []
    for name in sorted(os.listdir(dir_fd)):
        try:
            found.append((name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False)))
        except FileNotFoundError:
            continue
    return found


@dataclass(frozen=True)
class TreeFile:
    """A regular file met by `walk_files`: its path below the walked top and its lstat. `open`
    works while the walk stands on it (its directory's descriptor is the walk's)."""

    relative: str
    size: int
    nlink: int
    mtime: float
    dir_fd: int
    name: str

    def open(self) -> int:
        try:
            fd = os.open(self.name, _FILE, dir_fd=self.dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise TreeRefused(self.relative, LINK) from None
            raise OSError(exc.errno, exc.strerror, self.relative) from None
        return _checked(fd, directory=False, shown=self.relative)


Policy = Literal["refuse", "skip"]


def walk_files(
    top_fd: int,
    *,
    links: Policy,
    special: Policy = "skip",
    unreadable: Literal["raise", "skip"] = "raise",
    max_depth: int = MAX_DEPTH,
) -> Iterator[TreeFile]:
    """The regular files below an open directory, depth first, sorted by name, no link
    followed. A symbolic link met is refused (TreeRefused naming it) or skipped, per
    `links`; a fifo, socket or device per `special`; a directory that cannot be opened
    raises or is skipped, per `unreadable`. `top_fd` stays open."""
    yield from _walk(top_fd, "", 0, links, special, unreadable, max_depth)


def _walk(fd, prefix, depth, links, special, unreadable, max_depth) -> Iterator[TreeFile]:
    try:
        listed = entries(fd)
    except OSError as exc:
        if unreadable == "skip":
            return
        raise OSError(exc.errno, exc.strerror, prefix.rstrip("/") or ".") from None
    for name, info in listed:
        relative = prefix + name
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            if links == "refuse":
                raise TreeRefused(relative, LINK)
            continue
        if stat.S_ISREG(mode):
            yield TreeFile(relative, info.st_size, info.st_nlink, info.st_mtime, fd, name)
        elif stat.S_ISDIR(mode):
            if depth + 1 > max_depth:
                raise TreeRefused(relative, f"lies deeper than {max_depth} directories")
            try:
                sub = os.open(name, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link meanwhile
                    if links == "refuse":
                        raise TreeRefused(relative, LINK) from None
                    continue
                if unreadable == "skip":
                    continue
                raise OSError(exc.errno, exc.strerror, relative) from None
            try:
                yield from _walk(
                    sub, relative + "/", depth + 1, links, special, unreadable, max_depth
                )
            finally:
                os.close(sub)
        elif special == "refuse":
            raise TreeRefused(relative, "is not a regular file")


# -- copying a tree --------------------------------------------------------------------------


@dataclass(frozen=True)
class Copied:
    relative: str
    size: int
    sha256: str


def copy_tree(
    top_fd: int,
    *,
    store: Callable[[str, HashedChunks], object],
    links: Policy = "refuse",
    special: Policy = "skip",
    hard_links: Policy = "refuse",
    max_files: int | None = None,
    max_bytes: int | None = None,
    path_problem: Callable[[str], str | None] | None = None,
) -> list[Copied]:
    """Stream every regular file below `top_fd` to `store(relative, chunks)` (which consumes
    the chunks: hashed and counted as they pass), in walk order. A link (per `links`), a
    file with other hard links (per `hard_links`: one may name a file from anywhere), a
    path `path_problem` objects to, more than `max_files` files or more than `max_bytes`
    in all: TreeRefused, naming the entry, and the caller discards what was stored."""
    copied: list[Copied] = []
    total = 0
    for entry in walk_files(top_fd, links=links, special=special):
        problem = path_problem(entry.relative) if path_problem else None
        if problem:
            raise TreeRefused(entry.relative, problem)
        if entry.nlink > 1:
            if hard_links == "refuse":
                raise TreeRefused(entry.relative, "has other hard links; refused")
            continue
        if max_files is not None and len(copied) >= max_files:
            raise TreeRefused(".", f"holds more than {max_files} files")
        fd = entry.open()
        try:
            if os.fstat(fd).st_nlink > 1 and hard_links == "refuse":  # linked meanwhile
                raise TreeRefused(entry.relative, "has other hard links; refused")
            left = None if max_bytes is None else max_bytes - total
            over = f"takes the tree over {max_bytes} bytes"
            chunks = HashedChunks(fd, name=entry.relative, limit=left, over=over)
            store(entry.relative, chunks)
        finally:
            os.close(fd)
        total += chunks.size
        copied.append(Copied(entry.relative, chunks.size, chunks.hexdigest))
    return copied
