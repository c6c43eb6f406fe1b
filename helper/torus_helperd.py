"""torus-helperd: the one privileged process of the Torus platform (docs/security.md,
"The privileged helper").

Standard library only; no Django, nothing imported from the platform. Runs as root, listens on
a Unix socket (mode 0660 root:<platform group>), and serves one JSON request per connection
(one line in, one line out) from a caller whose SO_PEERCRED uid is 0 or the platform account.
Everything it may touch comes from its own config file (written by
platform/services/components/helper), never from the caller:

    {"socket", "log", "account", "roots": [...], "uid_range": [lo, hi], "gid_range": [lo, hi],
     "jwt_key", "slurm_conf", "sbatch", "python", "stager"}

Verbs (every argument typed and checked; no shell; every refusal logged with its reason):
    dirs          make or re-apply directories (owner, mode, platform ACLs) below a root,
                  walking from the root's descriptor one component at a time (O_NOFOLLOW)
    chown         hand a regular file or directory below a root to a user (fchown/fchmod)
    write         write files below a root for a user (created beside, renamed into place)
    sbatch        run sbatch as a user with a fixed environment; variables via --export-file
    sstat         the live usage of a user's running jobs (sstat beside sbatch), read as that
                  user: slurmd tells a step's statistics only to its owner, root or SlurmUser
    stager-evict  run the node cache's stager as a cache subtree's owner ("evict")
    stager-usage  the same, "usage": the subtree's bytes and versions, read as its owner
    slurm-token   an HS256 JWT for a user in the range or the platform account
    remove-tree   remove a directory and everything in it below a root (a purge), walking
                  from the root's descriptor (O_NOFOLLOW|O_DIRECTORY), removing with dir_fd,
                  never following a link; a missing path is success
    local-*       local accounts (groupadd, groupdel, useradd, chpasswd, gpasswd --members)
                  for a site without a directory: names and numbers of the ranges only
    ping
Usage: torus_helperd.py CONFIG
"""

import base64
import contextlib
import errno
import grp
import hashlib
import hmac
import json
import logging
import os
import pwd
import re
import socket
import socketserver
import stat
import struct
import subprocess
import sys
import threading
import time

MAX_REQUEST = 8 * 1024 * 1024
MAX_FILES_BYTES = 4 * 1024 * 1024
MAX_DIRS = 32
DIR_MODES = {0o700, 0o750, 0o755, 0o2750, 0o2770, 0o3770}
FILE_MODES = {0o400, 0o440, 0o600, 0o640}
NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")  # a POSIX user name, as useradd takes it
VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ID_RE = re.compile(r"^[0-9a-f-]{36}$")  # the stager's version ids
SBATCH_VALUED = {
    "job-name", "comment", "account", "chdir", "output", "error", "nodes", "ntasks-per-node",
    "cpus-per-task", "mem", "time", "partition", "gres", "exclude", "nice",
}  # fmt: skip
SBATCH_FLAGS = {"no-requeue", "parsable"}
TOKEN_SECONDS = 3600
log = logging.getLogger("torus-helperd")


class Refused(Exception):
    """The request breaks a rule: nothing was changed."""


class Failed(Exception):
    """The request was allowed but the system refused it (an OSError)."""


def _int(request: dict, key: str) -> int:
    value = request.get(key)
    if type(value) is not int:
        raise Refused(f"{key} must be an integer")
    return value


def _str(request: dict, key: str, *, limit: int = 4096) -> str:
    value = request.get(key)
    if type(value) is not str or not value or len(value) > limit or "\0" in value:
        raise Refused(f"{key} must be a non-empty string of at most {limit} characters")
    return value


def _bool(request: dict, key: str) -> bool:
    value = request.get(key, False)
    if type(value) is not bool:
        raise Refused(f"{key} must be true or false")
    return value


class Helper:
    def __init__(self, config: dict):
        self.config = config
        self.roots = [os.path.normpath(r) for r in config["roots"]]
        for root in self.roots:
            if not root.startswith("/"):
                raise SystemExit(f"root {root!r} is not absolute")
        self.uid_range = tuple(config["uid_range"])
        self.gid_range = tuple(config["gid_range"])
        account = pwd.getpwnam(config["account"])
        self.account = config["account"]
        self.platform_uid, self.platform_gid = account.pw_uid, account.pw_gid

    # -- checks ------------------------------------------------------------------------------

    def _in_range(self, value: int, bounds: tuple) -> bool:
        return bounds[0] <= value <= bounds[1]

    def owner(self, request: dict) -> tuple[int, int]:
        uid, gid = _int(request, "uid"), _int(request, "gid")
        if uid not in (0, self.platform_uid) and not self._in_range(uid, self.uid_range):
            raise Refused(f"uid {uid} is neither root, the platform account nor in the uid range")
        if gid not in (0, self.platform_gid) and not self._in_range(gid, self.gid_range):
            raise Refused(f"gid {gid} is neither root, the platform group nor in the gid range")
        return uid, gid

    def split(self, path: str) -> tuple[str, list[str]]:
        """(root, components below it) of an absolute, normal path below a configured root."""
        if not path.startswith("/") or path != os.path.normpath(path) or "//" in path:
            raise Refused(f"path {path!r} is not an absolute normal path")
        parts = path.split("/")
        if any(p in (".", "..") for p in parts) or any(len(p) > 255 for p in parts):
            raise Refused(f"path {path!r} has a '.', '..' or over-long component")
        for root in sorted(self.roots, key=len, reverse=True):
            if path == root:
                return root, []
            if path.startswith(root + "/"):
                return root, path[len(root) + 1 :].split("/")
        raise Refused(f"path {path!r} is outside the helper's roots")

    # -- descriptors -------------------------------------------------------------------------

    def open_root(self, root: str) -> int:
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise Failed(f"cannot open the root {root}: {exc.strerror}") from exc
        info = os.fstat(fd)
        if info.st_uid != 0 or info.st_mode & 0o022:
            os.close(fd)
            raise Refused(f"root {root} is not owned by root or is writable by others")
        return fd

    def open_dir(self, parent: int, name: str, path: str) -> int:
        """The directory `name` in the directory `parent`, never through a link."""
        try:
            return os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
            )
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Refused(f"{path}: component {name!r} is a link or not a directory") from exc
            if exc.errno == errno.ENOENT:
                raise Refused(f"{path}: component {name!r} does not exist") from exc
            raise Failed(f"{path}: cannot open {name!r}: {exc.strerror}") from exc

    def walk(self, path: str) -> tuple[int, str, list[int]]:
        """(descriptor of the path's parent, last name, descriptors opened, to close)."""
        root, parts = self.split(path)
        if not parts:
            raise Refused(f"path {path!r} is a root itself")
        fds = [self.open_root(root)]
        try:
            for name in parts[:-1]:
                fds.append(self.open_dir(fds[-1], name, path))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds[-1], parts[-1], fds

    # -- ACLs (the kernel's xattr format: version 2, then (tag u16, perm u16, id u32)) -------

    def acl(self, mode: int) -> bytes:
        """An ACL with the owner/group/other bits of `mode` and the platform account r-x (as
        `setfacl -m u:torus:r-x`; as a directory's default ACL, `d:u:torus:r-X`)."""
        user, group, other = (mode >> 6) & 7, (mode >> 3) & 7, mode & 7
        entries = [
            (0x01, user, 0xFFFFFFFF),  # ACL_USER_OBJ
            (0x02, 5, self.platform_uid),  # ACL_USER: the platform account, r-x
            (0x04, group, 0xFFFFFFFF),  # ACL_GROUP_OBJ
            (0x10, group | 5, 0xFFFFFFFF),  # ACL_MASK
            (0x20, other, 0xFFFFFFFF),  # ACL_OTHER
        ]
        return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)

    # -- verbs -------------------------------------------------------------------------------

    def verb_ping(self, request: dict) -> dict:
        return {}

    def verb_dirs(self, request: dict) -> dict:
        items = request.get("dirs")
        if type(items) is not list or not 1 <= len(items) <= MAX_DIRS:
            raise Refused(f"dirs must be a list of 1 to {MAX_DIRS} directories")
        checked = []
        for item in items:  # every entry is checked before anything is made
            if type(item) is not dict:
                raise Refused("each directory must be an object")
            path = _str(item, "path")
            uid, gid = self.owner(item)
            mode = _int(item, "mode")
            if mode not in DIR_MODES:
                raise Refused(f"mode {mode:o} is not one of the allowed directory modes")
            flags = (_bool(item, "platform_acl"), _bool(item, "default_acl"))
            _, parts = self.split(path)
            checked.append((path, parts, uid, gid, mode, flags, _bool(item, "enforce")))
        made = []
        for path, parts, uid, gid, mode, (access_acl, default_acl), enforce in checked:
            if not parts:  # a root itself: made by the services bring-up, left as it is
                continue
            parent, name, fds = self.walk(path)
            try:
                if self._make_dir(parent, name, path, uid, gid, mode, access_acl, default_acl,
                                  enforce):  # fmt: skip
                    made.append(path)
            finally:
                for fd in fds:
                    os.close(fd)
        return {"changed": made}

    def _make_dir(self, parent, name, path, uid, gid, mode, access_acl, default_acl, enforce):
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
            new = True
        except FileExistsError:
            new = False
        except OSError as exc:
            raise Failed(f"cannot make {path}: {exc.strerror}") from exc
        fd = self.open_dir(parent, name, path)
        try:
            info = os.fstat(fd)
            # made by this helper (0700, root) but never handed over: a helper killed between
            # the mkdir and the chown; finished now
            half_made = info.st_uid == 0 != uid and info.st_mode & 0o777 == 0o700
            if not (new or enforce or half_made):
                return False
            os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
            if access_acl:
                os.setxattr(fd, "system.posix_acl_access", self.acl(mode))
            if default_acl:
                os.setxattr(fd, "system.posix_acl_default", self.acl(mode))
            return True
        except OSError as exc:
            raise Failed(f"cannot set the owner, mode or ACL of {path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def verb_chown(self, request: dict) -> dict:
        path = _str(request, "path")
        uid, gid = self.owner(request)
        mode = _int(request, "mode")
        if mode not in DIR_MODES | FILE_MODES:
            raise Refused(f"mode {mode:o} is not one of the allowed modes")
        parent, name, fds = self.walk(path)
        try:
            try:
                fd = os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Refused(f"{path} is a link") from exc
                raise Failed(f"cannot open {path}: {exc.strerror}") from exc
            try:
                kind = os.fstat(fd).st_mode
                if stat.S_ISDIR(kind) and mode not in DIR_MODES:
                    raise Refused(f"mode {mode:o} is not a directory mode")
                if stat.S_ISREG(kind) and mode not in FILE_MODES:
                    raise Refused(f"mode {mode:o} is not a file mode")
                if not (stat.S_ISDIR(kind) or stat.S_ISREG(kind)):
                    raise Refused(f"{path} is neither a regular file nor a directory")
                if stat.S_ISREG(kind) and os.fstat(fd).st_nlink != 1:
                    raise Refused(f"{path} has other hard links")
                os.fchown(fd, uid, gid)
                os.fchmod(fd, mode)
            except OSError as exc:
                raise Failed(f"cannot hand over {path}: {exc.strerror}") from exc
            finally:
                os.close(fd)
        finally:
            for fd in fds:
                os.close(fd)
        return {}

    def verb_write(self, request: dict) -> dict:
        items = request.get("files")
        if type(items) is not list or not 1 <= len(items) <= 8:
            raise Refused("files must be a list of 1 to 8 files")
        checked, total = [], 0
        for item in items:
            if type(item) is not dict:
                raise Refused("each file must be an object")
            path = _str(item, "path")
            uid, gid = self.owner(item)
            mode = _int(item, "mode")
            if mode not in FILE_MODES:
                raise Refused(f"mode {mode:o} is not one of the allowed file modes")
            try:
                content = base64.b64decode(_str(item, "content", limit=MAX_REQUEST), validate=True)
            except ValueError as exc:
                raise Refused("content must be base64") from exc
            total += len(content)
            if total > MAX_FILES_BYTES:
                raise Refused(f"files over {MAX_FILES_BYTES} bytes in all")
            self.split(path)
            checked.append((path, uid, gid, mode, content))
        for path, uid, gid, mode, content in checked:
            parent, name, fds = self.walk(path)
            tmp = f".{name[:200]}.{os.urandom(6).hex()}.tmp"
            try:
                fd = os.open(
                    tmp,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                    dir_fd=parent,
                )
                try:
                    view = memoryview(content)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fchown(fd, uid, gid)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
                os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                raise Failed(f"cannot write {path}: {exc.strerror}") from exc
            finally:
                for fd in fds:
                    os.close(fd)
        return {}

    def _user(self, name: str, uid: int | None = None) -> pwd.struct_passwd:
        """A user in the uid range whose name resolves (NSS) to exactly `uid`."""
        if not NAME_RE.match(name):
            raise Refused(f"user {name!r} is not a valid user name")
        try:
            entry = pwd.getpwnam(name)
        except KeyError as exc:
            raise Refused(f"user {name!r} does not resolve") from exc
        if uid is not None and entry.pw_uid != uid:
            raise Refused(f"user {name!r} resolves to uid {entry.pw_uid}, not {uid}")
        if not self._in_range(entry.pw_uid, self.uid_range):
            raise Refused(f"user {name!r} (uid {entry.pw_uid}) is outside the uid range")
        return entry

    def verb_sbatch(self, request: dict) -> dict:
        user = _str(request, "user", limit=32)
        uid, gid = _int(request, "uid"), _int(request, "gid")
        entry = self._user(user, uid)
        if not self._in_range(gid, self.gid_range):
            raise Refused(f"gid {gid} is outside the gid range")
        options = request.get("options")
        if type(options) is not list or len(options) > 64:
            raise Refused("options must be a list of at most 64 strings")
        argv = [self.config["sbatch"]]
        for option in options:
            if type(option) is not str or len(option) > 4096:
                raise Refused("each option must be a string of at most 4096 characters")
            if any(ord(c) < 32 or ord(c) == 127 for c in option):
                raise Refused(f"option {option[:40]!r} holds a control character")
            name, eq, value = option.partition("=")
            bare = name[2:] if name.startswith("--") else None
            if (bare in SBATCH_FLAGS and not eq) or (bare in SBATCH_VALUED and eq and value):
                argv.append(option)
            else:
                raise Refused(f"option {name[:40]!r} is not allowed (or lacks its value)")
        if _bool(request, "export_none"):
            argv.append("--export=NONE")
        script = _str(request, "script", limit=MAX_REQUEST)
        environment = request.get("environment")
        if type(environment) is not dict:
            raise Refused("environment must be an object")
        export = bytearray()
        for key, value in environment.items():
            if not VAR_RE.match(key) or type(value) is not str or "\0" in value:
                raise Refused(f"environment variable {key[:40]!r} has a bad name or value")
            export += f"{key}={value}".encode() + b"\0"
        groups = sorted(set(os.getgrouplist(entry.pw_name, gid)) | {gid})
        read_end, write_end = os.pipe()
        os.set_inheritable(read_end, True)
        argv.append(f"--export-file={read_end}")
        env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": self.config["slurm_conf"]}
        env["LANG"] = "C.UTF-8"
        try:
            process = subprocess.Popen(  # noqa: S603 (argv list, every item checked above)
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(read_end,),
                user=uid,
                group=gid,
                extra_groups=groups,
                env=env,
                cwd="/",
                umask=0o022,  # sbatch hands its umask to the job (SLURM_UMASK): as slurmrestd's
            )
        except OSError as exc:
            os.close(write_end)
            raise Failed(f"cannot run sbatch: {exc.strerror}") from exc
        finally:
            os.close(read_end)

        def feed():
            try:
                _write_all(write_end, bytes(export))
            except OSError:  # sbatch exited without reading it all: its answer says why
                pass
            finally:
                os.close(write_end)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        try:
            stdout, stderr = process.communicate(script.encode(), timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        feeder.join(timeout=5)
        return {
            "returncode": process.returncode,
            "stdout": stdout.decode(errors="replace")[:65536],
            "stderr": stderr.decode(errors="replace")[:65536],
        }

    def verb_sstat(self, request: dict) -> dict:
        user = _str(request, "user", limit=32)
        entry = self._user(user, _int(request, "uid"))
        jobs = request.get("jobs")
        if type(jobs) is not list or not 1 <= len(jobs) <= 256:
            raise Refused("jobs must be a list of 1 to 256 job ids")
        if any(type(job) is not int or job <= 0 for job in jobs):
            raise Refused("each job id must be a positive integer")
        argv = [
            os.path.join(os.path.dirname(self.config["sbatch"]), "sstat"),
            *("--allsteps", "--noheader", "--parsable2", "--noconvert"),
            *("--jobs", ",".join(str(job) for job in jobs)),
            *("--format", "JobID,NTasks,TRESUsageInTot"),
        ]
        env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": self.config["slurm_conf"], "LANG": "C"}
        try:
            result = subprocess.run(  # noqa: S603 (a fixed argv of checked numbers)
                argv,
                capture_output=True,
                user=entry.pw_uid,
                group=entry.pw_gid,
                extra_groups=[],
                env=env,
                cwd="/",
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Failed(f"cannot run sstat: {exc}") from exc
        return {
            "returncode": result.returncode,
            "stdout": result.stdout.decode(errors="replace")[:1048576],
            "stderr": result.stderr.decode(errors="replace")[:65536],
        }

    def verb_remove_tree(self, request: dict) -> dict:
        """Remove the directory `path` (below a root, never a root itself) and all it holds.
        Every component is opened from its parent's descriptor with O_NOFOLLOW|O_DIRECTORY;
        what is not a directory (a file, a link, a fifo) is unlinked by name in its parent,
        never followed. A path already missing is success (`removed` false)."""
        path = _str(request, "path")
        root, parts = self.split(path)
        if not parts:
            raise Refused(f"path {path!r} is a root itself")
        fds = [self.open_root(root)]
        try:
            for name in parts[:-1]:
                try:
                    fds.append(self._open_child(fds[-1], name))
                except FileNotFoundError:
                    return {"removed": False}
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise Refused(
                            f"{path}: component {name!r} is a link or not a directory"
                        ) from exc
                    raise Failed(f"{path}: cannot open {name!r}: {exc.strerror}") from exc
            try:
                top = self._open_child(fds[-1], parts[-1])
            except FileNotFoundError:
                return {"removed": False}
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{path} is a link or not a directory") from exc
                raise Failed(f"cannot open {path}: {exc.strerror}") from exc
            try:
                self._empty(top, path)
            finally:
                os.close(top)
            try:
                os.rmdir(parts[-1], dir_fd=fds[-1])
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise Failed(f"cannot remove {path}: {exc.strerror}") from exc
        finally:
            for fd in fds:
                os.close(fd)
        return {"removed": True}

    @staticmethod
    def _open_child(parent: int, name: str) -> int:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        return os.open(name, flags, dir_fd=parent)

    def _empty(self, top: int, path: str) -> None:
        """Remove everything in the directory `top`, depth first without recursion: one
        descriptor per level, each child opened from its parent's, names listed once."""
        stack = [(top, None, None, iter(os.listdir(top)))]  # (fd, name, parent fd, names)
        try:
            while stack:
                fd, _name, _parent, names = stack[-1]
                for name in names:
                    try:
                        child = self._open_child(fd, name)
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                            raise Failed(f"{path}: cannot open {name!r}: {exc.strerror}") from exc
                        self._unlink(fd, name, path)  # a file, a link (not followed), a fifo
                        continue
                    try:
                        stack.append((child, name, fd, iter(os.listdir(child))))
                    except BaseException:
                        os.close(child)
                        raise
                    break
                else:  # every name of this level handled: the level itself goes
                    fd, name, parent, _ = stack.pop()
                    if parent is None:
                        return  # the top: closed and removed by the caller
                    os.close(fd)
                    try:
                        os.rmdir(name, dir_fd=parent)
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        raise Failed(f"{path}: cannot remove {name!r}: {exc.strerror}") from exc
        finally:
            for fd, _name, parent, _ in stack:
                if parent is not None:
                    os.close(fd)

    @staticmethod
    def _unlink(parent: int, name: str, path: str) -> None:
        try:
            os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise Failed(f"{path}: cannot remove {name!r}: {exc.strerror}") from exc

    def verb_stager_evict(self, request: dict) -> dict:
        version = _str(request, "version", limit=64)
        if not ID_RE.match(version):
            raise Refused(f"version {version!r} is not a version id")
        return self._stager_as_owner(_str(request, "subtree"), ["evict", version])

    def verb_stager_usage(self, request: dict) -> dict:
        return self._stager_as_owner(_str(request, "subtree"), ["usage"])

    def _stager_as_owner(self, path: str, action: list[str]) -> dict:
        """The stager run as a cache subtree's owner: `action[0]` on the subtree, then the
        rest of `action` (checked by the verb)."""
        root, parts = self.split(path)
        if len(parts) < 4:
            raise Refused(f"{path} is not a cache subtree <node>/<tenant>/<project>/<uid>")
        fds = [self.open_root(root)]
        try:
            for name in parts:
                fds.append(self.open_dir(fds[-1], name, path))
            infos = [os.fstat(fd) for fd in fds[-3:]]
        finally:
            for fd in fds:
                os.close(fd)
        project, info = infos[1], infos[2]
        tenant = infos[0]
        if not (parts[-1].isdigit() and int(parts[-1]) == info.st_uid):
            raise Refused(f"{path} is not owned by the uid it is named for")
        if not self._in_range(info.st_uid, self.uid_range) or info.st_mode & 0o077:
            raise Refused(f"{path} is outside the uid range or open to others")
        try:
            with open(self.config["stager"], "rb") as source:
                program = source.read()
        except OSError as exc:
            raise Failed(f"cannot read the stager: {exc.strerror}") from exc
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "SLURM_CONF": self.config["slurm_conf"]}
        result = subprocess.run(  # noqa: S603 (fixed program; argv checked above)
            [self.config["python"], "-I", "-", action[0], path, *action[1:]],
            input=program,
            capture_output=True,
            user=info.st_uid,
            group=info.st_gid,
            # the tenant's and project's groups (to cross their directories), never another
            extra_groups=sorted(
                g for g in {project.st_gid, tenant.st_gid} if self._in_range(g, self.gid_range)
            ),
            env=env,
            cwd="/",
            timeout=300,
            check=False,
        )
        return {
            "returncode": result.returncode,
            "stdout": result.stdout.decode(errors="replace")[:65536],
            "stderr": result.stderr.decode(errors="replace")[:65536],
        }

    def verb_slurm_token(self, request: dict) -> dict:
        user = _str(request, "user", limit=32)
        if user != self.account:
            self._user(user)
        try:
            with open(self.config["jwt_key"], "rb") as handle:
                key = handle.read()
        except OSError as exc:
            raise Failed(f"cannot read the Slurm JWT key: {exc.strerror}") from exc
        now = int(time.time())
        claims = {"iat": now, "exp": now + TOKEN_SECONDS, "sun": user}

        def part(value: dict) -> bytes:
            text = json.dumps(value, separators=(",", ":")).encode()
            return base64.urlsafe_b64encode(text).rstrip(b"=")

        signed = part({"alg": "HS256", "typ": "JWT"}) + b"." + part(claims)
        mac = hmac.new(key, signed, hashlib.sha256).digest()
        token = signed + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")
        return {"token": token.decode(), "exp": claims["exp"]}

    # -- local accounts (TORUS_IDENTITY_BACKEND=local): names and numbers of the ranges only --

    def _admin(self, argv: list[str], *, stdin: str | None = None) -> dict:
        result = subprocess.run(  # noqa: S603 (fixed programs; every argument checked)
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"},
            cwd="/",
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise Failed(f"{os.path.basename(argv[0])}: {result.stderr.strip()[:500]}")
        return {}

    def _name(self, request: dict, key: str = "name") -> str:
        name = _str(request, key, limit=32)
        if not NAME_RE.match(name):
            raise Refused(f"{key} {name!r} is not a valid user or group name")
        return name

    def _own_group(self, name: str) -> None:
        """An existing group with a number of the gid range (never root's, sudo, ...)."""
        try:
            gid = grp.getgrnam(name).gr_gid
        except KeyError as exc:
            raise Refused(f"group {name!r} does not exist") from exc
        if not self._in_range(gid, self.gid_range):
            raise Refused(f"group {name!r} (gid {gid}) is outside the gid range")

    def verb_local_group(self, request: dict) -> dict:
        name, gid = self._name(request), _int(request, "gid")
        if not self._in_range(gid, self.gid_range):
            raise Refused(f"gid {gid} is outside the gid range")
        return self._admin(["/usr/sbin/groupadd", "--gid", str(gid), "--", name])

    def verb_local_group_remove(self, request: dict) -> dict:
        """A local group of the gid range removed (a purged project's); a missing one is
        success."""
        name = self._name(request)
        try:
            grp.getgrnam(name)
        except KeyError:
            return {}
        self._own_group(name)
        return self._admin(["/usr/sbin/groupdel", "--", name])

    def verb_local_user(self, request: dict) -> dict:
        """A user and its private group (same name)."""
        name, uid, gid = self._name(request), _int(request, "uid"), _int(request, "gid")
        if not self._in_range(uid, self.uid_range) or not self._in_range(gid, self.gid_range):
            raise Refused(f"uid {uid} or gid {gid} is outside its range")
        comment = request.get("comment", "")
        if type(comment) is not str or len(comment) > 128 or not comment.isprintable():
            raise Refused("comment must be printable, at most 128 characters")
        comment = comment.replace(":", " ") or name
        self._admin(["/usr/sbin/groupadd", "--gid", str(gid), "--", name])
        return self._admin(
            ["/usr/sbin/useradd", "--uid", str(uid), "--gid", str(gid), "--no-create-home",
             "--home-dir", "/nonexistent", "--shell", "/bin/bash", "--comment", comment, "--",
             name]
        )  # fmt: skip

    def verb_local_password(self, request: dict) -> dict:
        name = self._name(request)
        self._user(name)
        password = _str(request, "password", limit=256)
        if "\n" in password or "\r" in password:
            raise Refused("password must be one line")
        return self._admin(["/usr/sbin/chpasswd"], stdin=f"{name}:{password}\n")

    def verb_local_members(self, request: dict) -> dict:
        name = self._name(request)
        self._own_group(name)
        members = request.get("members")
        if type(members) is not list or len(members) > 10000:
            raise Refused("members must be a list of user names")
        for member in members:
            if type(member) is not str or not NAME_RE.match(member):
                raise Refused(f"member {str(member)[:40]!r} is not a valid user name")
            self._user(member)
        listed = ",".join(sorted(set(members)))
        return self._admin(["/usr/bin/gpasswd", "--members", listed, name])

    VERBS = {
        "ping": verb_ping,
        "dirs": verb_dirs,
        "chown": verb_chown,
        "write": verb_write,
        "sbatch": verb_sbatch,
        "sstat": verb_sstat,
        "stager-evict": verb_stager_evict,
        "stager-usage": verb_stager_usage,
        "slurm-token": verb_slurm_token,
        "remove-tree": verb_remove_tree,
        "local-group": verb_local_group,
        "local-group-remove": verb_local_group_remove,
        "local-user": verb_local_user,
        "local-password": verb_local_password,
        "local-members": verb_local_members,
    }

    def handle(self, caller: int, line: bytes) -> dict:
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        verb = request.get("verb") if type(request) is dict else None
        what = verb if type(verb) is str and verb in self.VERBS else "?"
        try:
            if caller not in (0, self.platform_uid):
                raise Refused(f"caller uid {caller} is neither root nor {self.account}")
            if what == "?":
                raise Refused("not a JSON object with a known verb")
            answer = self.VERBS[what](self, request)
        except Refused as exc:
            log.warning("refused %s from uid %s: %s", what, caller, exc)
            return {"ok": False, "error": "refused", "reason": str(exc)}
        except Failed as exc:
            log.warning("failed %s from uid %s: %s", what, caller, exc)
            return {"ok": False, "error": "failed", "reason": str(exc)}
        except Exception as exc:  # a bug: logged with its trace, answered, the daemon lives on
            log.exception("error in %s from uid %s", what, caller)
            return {"ok": False, "error": "failed", "reason": f"internal error: {exc}"}
        if what not in ("ping", "slurm-token", "sstat"):  # read-only, every 30 s
            log.info("%s from uid %s: %s", what, caller, _summary(what, request, answer))
        return {"ok": True, **answer}


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _summary(verb: str, request: dict, answer: dict) -> str:
    if verb == "dirs":
        return f"changed {answer.get('changed')}"
    if verb == "remove-tree":
        return f"{request.get('path')} removed {answer.get('removed')}"
    if verb in ("chown",):
        return f"{request.get('path')} -> {request.get('uid')}:{request.get('gid')}"
    if verb == "write":
        return ", ".join(str(f.get("path")) for f in request.get("files", []))
    if verb in ("sbatch", "sstat"):
        return f"user {request.get('user')} exit {answer.get('returncode')}"
    if verb.startswith("local-"):  # never the password
        numbers = [request.get(k) for k in ("uid", "gid") if k in request]
        return f"{request.get('name')} {numbers or ''} {request.get('members') or ''}".strip()
    return f"{request.get('subtree')} {request.get('version')} exit {answer.get('returncode')}"


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    # a dispatch pass's burst of callers waits in the backlog (the default 5 answers EAGAIN)
    request_queue_size = 256
    helper: Helper


class RequestHandler(socketserver.StreamRequestHandler):
    timeout = 30

    def handle(self):
        ucred = self.request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        _pid, caller, _gid = struct.unpack("3i", ucred)
        try:
            line = self.rfile.readline(MAX_REQUEST + 1)
        except OSError:
            return
        if len(line) > MAX_REQUEST:
            log.warning("refused a request over %s bytes from uid %s", MAX_REQUEST, caller)
            answer = {"ok": False, "error": "refused", "reason": "request too large"}
        else:
            answer = self.server.helper.handle(caller, line)
        with contextlib.suppress(OSError):
            self.wfile.write(json.dumps(answer).encode() + b"\n")


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: torus_helperd.py CONFIG")
    if os.geteuid() != 0:
        raise SystemExit("torus-helperd runs as root")
    with open(sys.argv[1]) as handle:
        config = json.load(handle)
    logging.basicConfig(
        filename=config["log"],
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    helper = Helper(config)
    path = config["socket"]
    tmp = f"{path}.{os.getpid()}.new"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.umask(0o077)
    server = Server(tmp, RequestHandler)
    os.chown(tmp, 0, helper.platform_gid)
    os.chmod(tmp, 0o660)
    os.replace(tmp, path)
    server.helper = helper
    if config.get("pidfile"):
        with open(config["pidfile"], "w") as handle:
            handle.write(f"{os.getpid()}\n")
    log.info("listening on %s (roots %s)", path, ", ".join(helper.roots))
    server.serve_forever()


if __name__ == "__main__":
    main()
