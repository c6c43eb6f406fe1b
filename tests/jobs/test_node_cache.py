"""The dataset cache's node-wide cap (apps/jobs/node_cache.py): three users' subtrees on one
node, filled by the stager; the sweep drops the node's least recently used versions,
whoever's, until the node fits its cap, never a leased one, each by its own user; the
platform's account does it without seeing into any subtree, and follows no link planted in
one."""

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from apps.jobs.node_cache import node_sweep
from apps.jobs.staging import STAGER

NODE = "n1"
USERS = {("acme", "vision", 299101), ("acme", "vision", 299102), ("globex", "nlp", 299103)}


@pytest.fixture
def area(settings):
    """A node's cache root (the test's own, below a root of the privileged helper, which runs
    each eviction) and shared storage, where every uid may traverse."""
    base = Path(settings.TORUS_DATASET_CACHE_ROOT)
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    (base / "shared").mkdir(mode=0o755)
    return base


GROUPS = {"acme": 399101, "globex": 399103}  # each tenant's (and here its project's) gid


def subtree(area: Path, tenant: str, project: str, uid: int) -> Path:
    """<node>/<tenant>/<project>/<uid> as cache_dirs_ensure makes it: the tenant and project
    levels closed to all but their group and (an ACL entry) the platform's account."""
    path = area / NODE / tenant / project / str(uid)
    path.mkdir(parents=True, mode=0o700)
    os.chmod(path.parent.parent.parent, 0o755)
    for parent in (path.parent, path.parent.parent):
        os.chown(parent, 0, GROUPS[tenant])
        os.chmod(parent, 0o750)
        subprocess.run(["setfacl", "-m", "u:torus:r-x", str(parent)], check=True)
    return path


def sweep_as_torus(node_dir: Path, *, cap: int, needed: int = 0) -> dict:
    """node_sweep in a process of the platform's account, as the worker runs it."""
    code = (
        "import django, json, sys; from pathlib import Path; django.setup();"
        "from apps.jobs.node_cache import node_sweep;"
        "print(json.dumps(node_sweep(node_dir=Path(sys.argv[1]), cap=int(sys.argv[2]),"
        " needed=int(sys.argv[3]))))"
    )
    result = subprocess.run(
        ["setpriv", "--reuid=torus", "--regid=torus", "--init-groups", "--",
         sys.executable, "-c", code, str(node_dir), str(cap), str(needed)],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def staged(area: Path, cache: Path, size: int, used: float) -> str:
    """A version of `size` bytes staged into `cache` by the stager (as root, then handed to
    the subtree's uid, as if its user had staged it), last used at `used`."""
    version_id = str(uuid.uuid4())
    data = os.urandom(size)
    (area / "shared" / version_id).mkdir()
    (area / "shared" / version_id / "f").write_bytes(data)
    out = area / f"attempt-{version_id[:8]}"
    out.mkdir()
    plan = {
        "out_dir": str(out), "cache": True, "cache_dir": str(cache), "limit_bytes": 10**9,
        "lease_s": 0,
        "datasets": [{"id": version_id, "as": "A", "ref": "d:1", "storage": "posix",
                      "root": str(area / "shared" / version_id),
                      "files": [{"path": "f", "size": size,
                                 "sha256": hashlib.sha256(data).hexdigest()}]}],
    }  # fmt: skip
    (out / "datasets.json").write_text(json.dumps(plan))
    os.chown(cache, 0, 0)  # the stager uses a subtree only if it is its own
    result = subprocess.run(
        [sys.executable, "-I", str(STAGER), str(out / "datasets.json")],
        env={"SLURMD_NODENAME": NODE, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    owner = int(cache.name)
    for dirpath, dirs, files in os.walk(cache):
        for name in [*dirs, *files]:
            os.chown(os.path.join(dirpath, name), owner, owner, follow_symlinks=False)
    os.chown(cache, owner, owner)
    os.utime(cache / "versions" / version_id, (used, used))
    return version_id


def cached(cache: Path) -> set[str]:
    return {p.name for p in (cache / "versions").iterdir()}


def test_the_node_drops_its_least_recently_used_versions_whoever_they_belong_to(area):
    a, b, c = (subtree(area, *user) for user in sorted(USERS))
    now = time.time()
    oldest_a = staged(area, a, 1000, now - 500)
    old_b = staged(area, b, 1000, now - 400)
    leased_c = staged(area, c, 1000, now - 300)
    newer_a = staged(area, a, 1000, now - 200)
    newest_b = staged(area, b, 1000, now - 100)
    lease = c / "leases" / leased_c
    lease.mkdir(mode=0o700, exist_ok=True)
    (lease / "pid-1.n1").touch()
    os.utime(lease / "pid-1.n1", (now + 3600, now + 3600))  # a job still reads it
    os.chown(lease, 299103, 299103)
    os.chown(lease / "pid-1.n1", 299103, 299103)

    # the worker's account cannot look into a user's subtree, yet the sweep counts them all
    peek = ["setpriv", "--reuid=torus", "--regid=torus", "--init-groups", "--", "ls", str(a)]
    assert subprocess.run(peek, capture_output=True, check=False).returncode != 0
    # under the cap: nothing goes
    assert sweep_as_torus(area / NODE, cap=5000) == {
        "bytes_before": 5000, "bytes_after": 5000, "evicted_versions": 0,
    }  # fmt: skip
    # 1,500 more to stage under a cap of 4,000: 5,000 + 1,500 - 4,000 = 2,500 to free, so
    # the three oldest that no job reads go, from two users; the leased one stays
    outcome = sweep_as_torus(area / NODE, cap=4000, needed=1500)
    assert outcome == {"bytes_before": 5000, "bytes_after": 2000, "evicted_versions": 3}
    assert cached(a) == set() and cached(b) == {newest_b} and cached(c) == {leased_c}
    assert not {oldest_a, old_b, newer_a} & (cached(a) | cached(b))
    # the blobs went with them, and what is left is still each user's own
    assert not [p for p in (a / "blobs").rglob("*") if p.is_file()]
    assert all(p.stat().st_uid == 299102 for p in [b, *b.rglob("*")])


def test_root_follows_no_link_planted_in_a_subtree(area):
    canary = area / "canary"
    canary.mkdir()
    (canary / "keep").write_text("x")
    mine = subtree(area, "acme", "vision", 299101)
    version_id = staged(area, mine, 1000, time.time() - 100)
    # a "version" that is a link to a directory outside, older than the real one
    planted = mine / "versions" / str(uuid.uuid4())
    planted.symlink_to(canary)
    os.utime(planted, (1, 1), follow_symlinks=False)
    # a subtree that is a link, one not owned by the uid it is named for, and one whose
    # blobs and versions are links
    (area / NODE / "acme" / "vision" / "299102").symlink_to(canary)
    other = subtree(area, "acme", "vision", 299104)
    os.chown(other, 299105, 299105)
    linked = subtree(area, "globex", "nlp", 299106)
    os.chown(linked, 299106, 299106)
    (linked / "blobs").symlink_to(canary)
    (linked / "versions").symlink_to(canary)

    outcome = node_sweep(node_dir=area / NODE, cap=10)
    assert outcome == {"bytes_before": 1000, "bytes_after": 0, "evicted_versions": 1}
    assert cached(mine) == {planted.name}
    assert (canary / "keep").read_text() == "x" and version_id not in cached(mine)
