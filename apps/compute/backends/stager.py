"""The dataset stager: run on each node of an attempt, as the job's user, before its tasks.

Standard library only, no Django: the dispatcher copies this file into the attempt's
directory with the plan (`datasets.json`) and the launcher runs `python3 -I stager.py PLAN`.

For every dataset version in the plan it gives the job a read-only directory and writes
`datasets-<node>.env` (TORUS_DATASET_<AS>=path lines and TORUS_DATASETS) and the report
`dataset-cache-<node>.json` (hits, misses, bytes staged) into the attempt's directory.

The node cache (one per node, one subtree per tenant/project/user, made by the platform):

    <cache dir>/blobs/<aa>/<sha256>     file contents by hash, 0400 (shared by versions)
                versions/<version id>/  the version's tree of hard links, dirs 0500; its
                                        mtime is when it was last used (LRU)
                leases/<version id>/*   a running job's claim (mtime = when it expires)
                locks/, tmp/

A version is staged under its lock (flock): two jobs wanting it at once stage it once. Files
are copied to tmp/, checked against the manifest's sha256 and linked into place; the tree
is renamed into versions/ in one step, so a reader never sees half a version. Room is made by
dropping least-recently-used versions that no job holds a lease on, then blobs no version
links to (link count 1). When no room can be made, or the node has no cache directory, a
POSIX version is read straight from shared storage. `stager.py evict DIR VERSION` drops one
version when the node as a whole is over its cap (apps/jobs/node_cache.py runs it as the
subtree's user).
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHUNK = 1024 * 1024
NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")
ID_RE = re.compile(r"^[0-9a-f-]{36}$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class StageError(Exception):
    pass


def _safe_relative(path: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StageError(f"bad path in manifest: {path!r}")
    if any(ord(c) < 32 for c in path):
        raise StageError(f"bad path in manifest: {path!r}")
    return path


@contextlib.contextmanager
def _locked(path: Path, *, blocking: bool = True):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _copy(reader, dest: Path, *, size: int, sha256: str) -> None:
    """Stream into dest, hashing; the content must match the manifest."""
    digest, written = hashlib.sha256(), 0
    with open(dest, "wb") as out:
        while chunk := reader.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
            written += len(chunk)
    if written != size or digest.hexdigest() != sha256:
        dest.unlink(missing_ok=True)
        raise StageError(f"{dest.name}: content differs from the manifest")
    os.chmod(dest, 0o400)


def _open_source(entry: dict, version: dict):
    url = entry.get("url")
    if url:
        if not url.startswith(("https://", "http://")):
            raise StageError("only http(s) URLs can be staged")
        return urllib.request.urlopen(url, timeout=60)  # noqa: S310 (scheme checked)
    return open(Path(version["root"]) / entry["path"], "rb")


def _make_writable(tree: Path) -> None:
    for dirpath, _dirs, _files in os.walk(tree):
        os.chmod(dirpath, 0o700)


def _seal(tree: Path) -> None:
    for dirpath, _dirs, _files in os.walk(tree, topdown=False):
        os.chmod(dirpath, 0o500)


class Cache:
    def __init__(self, directory: Path, *, limit: int):
        self.dir, self.limit = directory, limit
        self.blobs, self.versions = directory / "blobs", directory / "versions"
        self.leases, self.locks, self.tmp = (
            directory / "leases",
            directory / "locks",
            directory / "tmp",
        )
        self.evicted_bytes = 0
        self.evicted_versions = 0

    def usable(self) -> str:
        """'' when the directory is this user's own, else why it is not used."""
        try:
            info = os.lstat(self.dir)
        except OSError:
            return "no cache directory on this node"
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return "the cache directory is not this user's"
        if info.st_mode & 0o077:
            return "the cache directory is open to others"
        for path in (self.blobs, self.versions, self.leases, self.locks, self.tmp):
            path.mkdir(mode=0o700, exist_ok=True)
        return ""

    def blob(self, sha256: str) -> Path:
        return self.blobs / sha256[:2] / sha256

    def lease(self, version_id: str, *, name: str, seconds: int) -> None:
        directory = self.leases / version_id
        directory.mkdir(mode=0o700, exist_ok=True)
        path = directory / name
        path.touch(mode=0o600)
        until = time.time() + seconds
        os.utime(path, (until, until))

    def leased(self, version_id: str) -> bool:
        """A job may still read the version: a lease not expired whose Slurm job has not
        ended (a lease from outside Slurm lasts until it expires)."""
        directory, now, held = self.leases / version_id, time.time(), False
        with contextlib.suppress(FileNotFoundError):
            for lease in directory.iterdir():
                if lease.stat().st_mtime > now and _job_alive(lease.name):
                    held = True
                else:
                    lease.unlink(missing_ok=True)
        return held

    def used_bytes(self) -> int:
        total = 0
        for dirpath, _dirs, files in os.walk(self.blobs):
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
        return total

    def drop_orphans(self) -> int:
        """Blobs no version links to any more; the bytes freed."""
        freed = 0
        for dirpath, _dirs, files in os.walk(self.blobs):
            for name in files:
                path = os.path.join(dirpath, name)
                with contextlib.suppress(FileNotFoundError):
                    info = os.lstat(path)
                    if info.st_nlink == 1:
                        os.unlink(path)
                        freed += info.st_size
        return freed

    def make_room(self, needed: int, *, keep: str) -> bool:
        """Evict least-recently-used versions (never a leased one or `keep`) until `needed`
        more bytes fit under the limit. Called under the eviction lock."""
        if needed > self.limit:
            return False
        used = self.used_bytes()
        if used + needed <= self.limit:
            return True
        used -= self.drop_orphans()
        candidates = sorted(
            (entry.stat().st_mtime, entry.name)
            for entry in os.scandir(self.versions)
            if entry.is_dir(follow_symlinks=False) and entry.name != keep
        )
        for _mtime, version_id in candidates:
            if used + needed <= self.limit:
                break
            used -= self.evict(version_id) or 0
        return used + needed <= self.limit

    def evict(self, version_id: str) -> int | None:
        """Drop one version unless it is being staged or read (a lease), then the blobs no
        version links to any more: the bytes freed, or None when it was kept. Called under
        the eviction lock."""
        with _locked(self.locks / f"{version_id}.lock", blocking=False) as got:
            view = self.versions / version_id
            if not got or self.leased(version_id) or view.is_symlink() or not view.is_dir():
                return None
            doomed = self.tmp / f"evict-{version_id}-{os.getpid()}"
            os.chmod(view, 0o700)
            os.rename(view, doomed)
            _make_writable(doomed)
            shutil.rmtree(doomed)
            self.evicted_versions += 1
        freed = self.drop_orphans()
        self.evicted_bytes += freed
        return freed

    def stage(self, version: dict, *, lease_name: str, lease_seconds: int) -> dict:
        """Make `version` present in the cache; its path and what it took."""
        version_id = version["id"]
        view = self.versions / version_id
        result = {"hits": 0, "misses": 0, "bytes_staged": 0, "bytes_hit": 0}
        with _locked(self.locks / f"{version_id}.lock"):
            if view.is_dir():
                os.utime(view)
                self.lease(version_id, name=lease_name, seconds=lease_seconds)
                result["hits"] = len(version["files"])
                result["bytes_hit"] = sum(f["size"] for f in version["files"])
                return {**result, "path": str(view), "mode": "cached"}
            needed = sum(f["size"] for f in version["files"] if not self.blob(f["sha256"]).exists())
            with _locked(self.locks / ".evict"):
                if not self.make_room(needed, keep=version_id):
                    return {**result, "path": "", "mode": "full"}
            building = self.tmp / f"{version_id}-{os.getpid()}"
            if building.exists():
                _make_writable(building)
                shutil.rmtree(building)
            building.mkdir(mode=0o700)
            try:
                self._fill(building, version, result)
            except BaseException:
                _make_writable(building)
                shutil.rmtree(building, ignore_errors=True)
                raise
            _seal(building)
            os.chmod(building, 0o700)  # a directory moves to another parent only if writable
            os.rename(building, view)  # the whole version appears at once
            os.chmod(view, 0o500)
            self.lease(version_id, name=lease_name, seconds=lease_seconds)
        return {**result, "path": str(view), "mode": "staged"}

    def _fill(self, building: Path, version: dict, result: dict) -> None:
        """Link or copy every file of the version into `building`."""
        for entry in version["files"]:
            dest = building / _safe_relative(entry["path"])
            dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            blob = self.blob(entry["sha256"])
            try:  # already here for another version: a link, no copy
                os.link(blob, dest)
                result["hits"] += 1
                result["bytes_hit"] += entry["size"]
                continue
            except FileNotFoundError:
                pass
            with _open_source(entry, version) as reader:
                _copy(reader, dest, size=entry["size"], sha256=entry["sha256"])
            blob.parent.mkdir(mode=0o700, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.link(dest, blob)
            result["misses"] += 1
            result["bytes_staged"] += entry["size"]


def _job_alive(lease_name: str) -> bool:
    """'job-<id>.<node>': ask Slurm whether the job still runs; unsure means yes."""
    if not lease_name.startswith("job-"):
        return True
    job_id = lease_name[4:].split(".", 1)[0]
    if not job_id.isdigit():
        return True
    try:
        result = subprocess.run(  # noqa: S603
            ["squeue", "-h", "-j", job_id, "-o", "%T"],  # noqa: S607
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    if result.returncode != 0:
        return "Invalid job id" not in result.stderr
    return result.stdout.strip() in ("RUNNING", "PENDING", "CONFIGURING", "SUSPENDED")


def stage_direct(version: dict, out_dir: Path) -> str:
    """An S3 version without a usable cache: download into the attempt's own directory."""
    target = out_dir / "datasets" / version["id"]
    for entry in version["files"]:
        dest = target / _safe_relative(entry["path"])
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not dest.exists():
            with _open_source(entry, version) as reader:
                _copy(reader, dest, size=entry["size"], sha256=entry["sha256"])
    _seal(target)
    return str(target)


def run(plan_path: Path, *, node: str) -> dict:
    plan = json.loads(plan_path.read_text())
    if not NODE_RE.match(node):
        raise StageError(f"bad node name {node!r}")
    out_dir = Path(plan["out_dir"])
    started = time.monotonic()
    cache = None
    why_not = "" if plan.get("cache") else plan.get("note") or "turned off in the job's spec"
    if plan.get("cache"):
        cache = Cache(Path(plan["cache_dir"].replace("{node}", node)), limit=plan["limit_bytes"])
        why_not = cache.usable()
        if why_not:
            cache = None
    job_id = os.environ.get("SLURM_JOB_ID", "")
    lease_name = f"job-{job_id}.{node}" if job_id.isdigit() else f"pid-{os.getpid()}.{node}"
    report = {"node": node, "cache": cache is not None, "note": why_not, "versions": []}
    env = {}
    for version in plan["datasets"]:
        if not (NAME_RE.match(version["as"]) and ID_RE.match(version["id"])):
            raise StageError("bad dataset entry in the plan")
        for entry in version["files"]:
            if not SHA_RE.match(entry["sha256"]):
                raise StageError("bad sha256 in the plan")
        t0 = time.monotonic()
        outcome = {"hits": 0, "misses": 0, "bytes_staged": 0, "bytes_hit": 0, "mode": "direct"}
        if cache is not None:
            outcome = cache.stage(version, lease_name=lease_name, lease_seconds=plan["lease_s"])
        path = outcome.pop("path", "")
        if not path:
            if version["storage"] == "posix":
                path, outcome["mode"] = (
                    version["root"],
                    ("direct" if outcome["mode"] == "direct" else "direct (cache full)"),
                )
            else:
                path = stage_direct(version, out_dir)
                staged = sum(f["size"] for f in version["files"])
                outcome.update(misses=len(version["files"]), bytes_staged=staged)
        env[f"TORUS_DATASET_{version['as']}"] = path
        report["versions"].append(
            {
                "id": version["id"],
                "as": version["as"],
                **outcome,
                "seconds": round(time.monotonic() - t0, 6),
            }
        )
    env["TORUS_DATASETS"] = ",".join(v["as"] for v in plan["datasets"])
    for key in ("hits", "misses", "bytes_staged", "bytes_hit"):
        report[key] = sum(v[key] for v in report["versions"])
    report["evicted_bytes"] = cache.evicted_bytes if cache else 0
    report["evicted_versions"] = cache.evicted_versions if cache else 0
    report["seconds"] = round(time.monotonic() - started, 6)
    _write(out_dir / f"datasets-{node}.env", "".join(f"{k}={v}\n" for k, v in env.items()))
    _write(out_dir / f"dataset-cache-{node}.json", json.dumps(report))
    return report


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def evict_one(cache_dir: Path, version_id: str) -> dict:
    """`stager.py evict DIR VERSION`: the node-wide sweep (apps/jobs/node_cache.py) asks a
    user's cache, as that user, to drop one version: {"freed": bytes or null}."""
    if not ID_RE.match(version_id):
        raise StageError(f"bad version id {version_id!r}")
    cache = Cache(cache_dir, limit=0)
    why_not = cache.usable()
    if why_not:
        raise StageError(why_not)
    with _locked(cache.locks / ".evict"):
        return {"freed": cache.evict(version_id)}


def usage_of(cache_dir: Path) -> dict:
    """`stager.py usage DIR`: what the node-wide sweep needs of a user's cache, read as that
    user: its blobs' bytes and its versions with when each was last used, no link followed
    (a linked blobs/ or versions/ counts nothing)."""
    info = os.lstat(cache_dir)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise StageError("the cache directory is not this user's")
    cache = Cache(cache_dir, limit=0)
    used = 0 if os.path.islink(cache.blobs) else cache.used_bytes()
    versions = []
    if not os.path.islink(cache.versions):
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(cache.versions):
                found = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(found.st_mode) and ID_RE.match(entry.name):
                    versions.append([found.st_mtime, entry.name])
    return {"used": used, "versions": versions}


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "usage":
        try:
            print(json.dumps(usage_of(Path(argv[2]))))
        except (StageError, OSError) as exc:
            print(f"torus: reading the dataset cache failed: {exc}", file=sys.stderr)
            return 1
        return 0
    if len(argv) == 4 and argv[1] == "evict":
        try:
            print(json.dumps(evict_one(Path(argv[2]), argv[3])))
        except (StageError, OSError) as exc:
            print(f"torus: evicting from the dataset cache failed: {exc}", file=sys.stderr)
            return 1
        return 0
    if len(argv) != 2:
        print(
            "usage: stager.py PLAN.json | stager.py evict CACHE_DIR VERSION_ID"
            " | stager.py usage CACHE_DIR",
            file=sys.stderr,
        )
        return 2
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        report = run(Path(argv[1]), node=node)
    except (StageError, OSError, ValueError, KeyError) as exc:
        print(f"torus: staging datasets failed: {exc}", file=sys.stderr)
        return 1
    print(
        f"torus: datasets on {node}: {report['hits']} cached, {report['misses']} staged"
        f" ({report['bytes_staged']} bytes) in {report['seconds']:.3f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
