"""The platform's side of the privileged helper (helper/torus_helperd.py; docs/security.md,
"The privileged helper"): what needs root is asked of that one root daemon over its Unix
socket, one JSON request per connection. No platform process is root.

Errors: HelperUnavailable (no answer: the socket is missing, refused, or timed out),
HelperRefused (the request broke one of the helper's rules, or sbatch exited non-zero: its
stderr is the message), HelperFailed (allowed, but the system refused: an OSError there).
"""

import json
import socket
import threading
import time
from base64 import b64encode
from dataclasses import asdict, dataclass
from pathlib import Path

from django.conf import settings

TOKEN_MARGIN_SECONDS = 300  # a cached Slurm token is renewed this long before it expires
DIRS_PER_REQUEST = 32  # the helper's limit


class HelperError(Exception):
    """Base of the helper's errors."""


class HelperUnavailable(HelperError):
    """The helper could not be reached or did not answer (nothing, or something, was done)."""


class HelperRefused(HelperError):
    """A refusal (a rule of the helper), or sbatch's own non-zero exit (`returncode`, `stderr`)."""

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = ""):
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class HelperFailed(HelperError):
    """The request was allowed, but the filesystem or the system refused it."""


@dataclass(frozen=True)
class Directory:
    """One directory for `directories_make`: owner, mode, and the platform account's ACLs
    (r-x; the default ACL r-X for what is made below). `enforce`: re-apply on an existing one."""

    path: str
    uid: int
    gid: int
    mode: int
    platform_acl: bool = False
    default_acl: bool = False
    enforce: bool = False


def _connect(conn: socket.socket, path: str, *, tries: int = 50) -> None:
    """Connect, waiting while the helper's backlog is full (EAGAIN: a burst of callers)."""
    for attempt in range(tries):
        try:
            conn.connect(path)
            return
        except BlockingIOError:
            if attempt == tries - 1:
                raise
            time.sleep(0.01 * (attempt + 1))


def _call(request: dict, *, timeout: float = 30.0) -> dict:
    data = json.dumps(request).encode() + b"\n"
    path = settings.TORUS_HELPER_SOCKET
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            _connect(conn, path)
            conn.sendall(data)
            chunks = []
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                if chunk.endswith(b"\n"):
                    break
        except OSError as exc:  # missing, refused, EACCES, timed out
            raise HelperUnavailable(f"the privileged helper at {path}: {exc}") from exc
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError as exc:
        raise HelperUnavailable(f"the privileged helper at {path} gave no answer") from exc
    if answer.get("ok"):
        return answer
    reason = str(answer.get("reason") or "no reason given")
    if answer.get("error") == "refused":
        raise HelperRefused(f"the privileged helper refused: {reason}")
    raise HelperFailed(reason)


def directories_make(*, dirs: list[Directory]) -> list[str]:
    """Make (or put right) each directory in order, in one request (one per 32): the paths
    changed."""
    changed = []
    for start in range(0, len(dirs), DIRS_PER_REQUEST):
        chunk = [asdict(d) for d in dirs[start : start + DIRS_PER_REQUEST]]
        changed += _call({"verb": "dirs", "dirs": chunk})["changed"]
    return changed


def directory_make(
    *,
    path: Path | str,
    uid: int,
    gid: int,
    mode: int,
    platform_acl: bool = False,
    default_acl: bool = False,
    enforce: bool = False,
) -> bool:
    """One directory (not its parents): True when it was made or changed."""
    item = Directory(str(path), uid, gid, mode, platform_acl, default_acl, enforce)
    return bool(directories_make(dirs=[item]))


def hand_over(*, path: Path | str, uid: int, gid: int, mode: int) -> None:
    """Give a regular file or directory below a helper root to uid:gid with mode."""
    _call({"verb": "chown", "path": str(path), "uid": uid, "gid": gid, "mode": mode})


def files_write(*, files: list[tuple[Path | str, bytes]], uid: int, gid: int, mode: int) -> None:
    """Write each (path, content) as uid:gid with mode (made beside it, renamed into place)."""
    items = [
        {"path": str(p), "content": b64encode(c).decode(), "uid": uid, "gid": gid, "mode": mode}
        for p, c in files
    ]
    _call({"verb": "write", "files": items})


def tree_remove(*, path: Path | str) -> bool:
    """Remove a directory below a helper root and everything in it, never following a link
    (a purge): False when it was already gone."""
    return bool(_call({"verb": "remove-tree", "path": str(path)}, timeout=600.0)["removed"])


def sbatch(
    *,
    user: str,
    uid: int,
    gid: int,
    options: list[str],
    script: str,
    environment: dict[str, str],
    export_none: bool = False,
) -> str:
    """Run sbatch as `user` (who must resolve to `uid`) with the project's group `gid`: the
    script on stdin, `environment` only through --export-file, `options` each `--name=value`
    from the helper's allowlist. sbatch's stdout; HelperRefused with its stderr otherwise."""
    answer = _call(
        {
            "verb": "sbatch",
            "user": user,
            "uid": uid,
            "gid": gid,
            "options": options,
            "script": script,
            "environment": environment,
            "export_none": export_none,
        },
        timeout=90.0,
    )
    return _stdout(answer, program="sbatch")


def sstat(*, user: str, uid: int, jobs: list[int]) -> str:
    """Slurm's live usage of `user`'s running jobs (`sstat --allsteps`, parsable, one line a
    step: JobID|NTasks|TRESUsageInTot), read as that user; HelperRefused on sstat's failure."""
    answer = _call({"verb": "sstat", "user": user, "uid": uid, "jobs": jobs}, timeout=45.0)
    return _stdout(answer, program="sstat")


def _stdout(answer: dict, *, program: str) -> str:
    """A program's stdout the helper ran as a user; HelperRefused with its stderr if it
    exited non-zero."""
    if answer["returncode"] != 0:
        stderr = answer["stderr"].strip()
        raise HelperRefused(
            stderr or f"{program} exited {answer['returncode']}",
            returncode=answer["returncode"],
            stderr=stderr,
        )
    return answer["stdout"]


def stager_evict(*, subtree: Path | str, version_id: str) -> int | None:
    """The cache subtree's own user drops one version (`stager.py evict`): bytes freed, or
    None when it was kept (leased, being staged, gone)."""
    answer = _call(
        {"verb": "stager-evict", "subtree": str(subtree), "version": version_id}, timeout=330.0
    )
    if answer["returncode"] != 0:
        return None
    try:
        return int(json.loads(answer["stdout"])["freed"])
    except (ValueError, KeyError, TypeError):
        return None


def stager_usage(*, subtree: Path | str) -> dict | None:
    """A cache subtree's bytes and versions ({"used": n, "versions": [[mtime, id], ...]}),
    read by its own user (`stager.py usage`); None when it could not be read."""
    answer = _call({"verb": "stager-usage", "subtree": str(subtree)}, timeout=120.0)
    if answer["returncode"] != 0:
        return None
    try:
        usage = json.loads(answer["stdout"])
        return {"used": int(usage["used"]), "versions": list(usage["versions"])}
    except (ValueError, KeyError, TypeError):
        return None


_tokens: dict[str, tuple[str, int]] = {}
_tokens_lock = threading.Lock()


def slurm_token(*, user: str) -> str:
    """A Slurm JWT for `user` (a user in the uid range, or the platform's Slurm account), made
    by the helper (which alone reads the key) and kept here until shortly before it expires."""
    now = time.time()
    with _tokens_lock:
        cached = _tokens.get(user)
    if cached and cached[1] - TOKEN_MARGIN_SECONDS > now:
        return cached[0]
    answer = _call({"verb": "slurm-token", "user": user})
    with _tokens_lock:
        _tokens[user] = (answer["token"], int(answer["exp"]))
    return answer["token"]


def local_group_add(*, name: str, gid: int) -> None:
    """A local group (`groupadd`) of the gid range: TORUS_IDENTITY_BACKEND=local."""
    _call({"verb": "local-group", "name": name, "gid": gid})


def local_group_remove(*, name: str) -> None:
    """A local group of the gid range removed (`groupdel`); a missing one is success."""
    _call({"verb": "local-group-remove", "name": name})


def local_user_add(*, name: str, uid: int, gid: int, comment: str) -> None:
    """A local user of the uid range and its private group of the same name."""
    _call({"verb": "local-user", "name": name, "uid": uid, "gid": gid, "comment": comment})


def local_password_set(*, name: str, password: str) -> None:
    _call({"verb": "local-password", "name": name, "password": password})


def local_members_set(*, name: str, members: list[str]) -> None:
    """The members of a local group of the gid range (`gpasswd --members`)."""
    _call({"verb": "local-members", "name": name, "members": members})


def ping() -> None:
    _call({"verb": "ping"}, timeout=5.0)
