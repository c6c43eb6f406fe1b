"""The dataset cache on the nodes: its directories, and its node-wide cap (the least recently
used versions of every user's subtree on a node go first when the node as a whole is over
TORUS_DATASET_CACHE_NODE_BYTES).

The cache (settings.TORUS_DATASET_CACHE_ROOT) is made here, through the privileged helper
(apps/identity/privileged.py), for every node of the cluster; other tenants cannot traverse
it and only the user's jobs read their subtree:

    <cache root>/<node>/                  root            0755
      <tenant>/                           root:t-<tenant> 0750
        <project>/                        root:p-<t>_<p>  0750
          <uid>/                          <user>:p-<t>_<p> 0700  the stager's cache

Each user's subtree keeps its own limit (the stager's, TORUS_DATASET_CACHE_BYTES) and is
closed to everyone else, the platform's account included. The sweep runs in the worker (as
`torus`), at dispatch (before the attempt's stager may add to the node) for every node of the
cluster, as `cache_dirs_ensure` does. It lists the subtrees through the one reader of
tenants' trees (apps/identity/tree.py: from the node's directory, no link followed; the
tenant and project levels carry an ACL entry for the platform's account); each subtree's
bytes and versions are read, and each eviction done, by the subtree's own user through the
privileged helper (`stager.py usage` and `evict`, under that subtree's locks and leases), so a
link planted in a subtree reaches nothing its user could not reach anyway.
"""

import logging
import os
import re
import stat
from pathlib import Path

from django.conf import settings

from apps.compute.backends.stager import ID_RE
from apps.compute.models import Cluster
from apps.core.passes import Pass
from apps.identity import privileged, tree
from apps.identity.storage import StorageError

NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
logger = logging.getLogger(__name__)
# the sweeps' failures (apps/core/passes.py): one item per node and per subtree; one that
# cannot be read or swept is counted and logged once, and the sweep goes on with the rest
PASS = Pass("node_cache")


def cache_dir_template(job, identity) -> str:
    """The user's cache subtree on a node, with '{node}' for the node's name."""
    root = Path(settings.TORUS_DATASET_CACHE_ROOT)
    return str(root / "{node}" / job.tenant.slug / job.project.slug / str(identity.uid))


def cache_dirs_ensure(*, cluster: Cluster, job, identity) -> None:
    """The user's cache subtree on every node of the cluster (here the nodes share this
    machine's disk; on a site with many machines the same runs on each node), made by the
    privileged helper in one request."""
    root = Path(settings.TORUS_DATASET_CACHE_ROOT)
    Dir = privileged.Directory
    dirs = [Dir(str(root), 0, 0, 0o755)]  # jobs of every tenant enter their subtree
    for name in cluster.nodes.values_list("name", flat=True):
        if not NODE_RE.match(name):
            continue
        node = root / name
        tenant = node / job.tenant.slug
        project = tenant / job.project.slug
        dirs += [
            Dir(str(node), 0, 0, 0o755, enforce=True),
            # the platform's account lists the subtrees (node_sweep, below) through an
            # ACL entry; the subtrees themselves stay their users' alone
            Dir(str(tenant), 0, identity.tenant_gid, 0o750, platform_acl=True, enforce=True),
            Dir(str(project), 0, identity.gid, 0o750, platform_acl=True, enforce=True),
            Dir(str(project / str(identity.uid)), identity.uid, identity.gid, 0o700, enforce=True),
        ]
    try:
        privileged.directories_make(dirs=dirs)
    except privileged.HelperError as exc:
        raise StorageError(f"the dataset cache's directories: {exc}") from exc


def _listing(root_fd: int, relative: str) -> list[tuple[str, os.stat_result]]:
    """What a directory below the node's directory holds (lstat), reached through no link;
    [] when it cannot be opened (a link, gone, not readable)."""
    try:
        with tree.opened(root_fd, relative, directory=True) as fd:
            return tree.entries(fd)
    except OSError:
        return []


def _subtrees(node_fd: int, node_dir: Path) -> list[tuple[Path, os.stat_result]]:
    """<node>/<tenant>/<project>/<uid>: real directories owned by that uid, closed to others."""
    found = []
    for tenant, info in tree.entries(node_fd):
        if not stat.S_ISDIR(info.st_mode):
            continue
        for project, info in _listing(node_fd, tenant):
            if not stat.S_ISDIR(info.st_mode):
                continue
            for user, info in _listing(node_fd, f"{tenant}/{project}"):
                if (
                    stat.S_ISDIR(info.st_mode)
                    and user.isdigit()
                    and info.st_uid == int(user) != 0
                    and not info.st_mode & 0o077
                ):
                    found.append((node_dir / tenant / project / user, info))
    return found


def _usage(subtree: Path) -> tuple[int, list[tuple[float, str]]]:
    """A subtree's bytes and (last used, version id) of its versions, read by its own user
    through the privileged helper (`stager.py usage`: no link followed); nothing when it
    cannot be read."""
    try:
        usage = privileged.stager_usage(subtree=subtree)
    except privileged.HelperError as exc:
        logger.warning("dataset cache %s: not read: %s", subtree, exc)
        usage = None
    if usage is None:
        return 0, []
    versions = [
        (float(mtime), str(name))
        for mtime, name in usage["versions"]
        if isinstance(name, str) and ID_RE.match(name)
    ]
    return usage["used"], versions


def _evict_as_owner(subtree: Path, version_id: str) -> int | None:
    """The subtree's user drops one version: the bytes freed, None when it was kept. The
    privileged helper runs the stager (its own root-owned copy, on the node's python3's stdin)
    as the subtree's owner, with the groups of the directories above it (the tenant's and the
    project's, as its jobs have) and the cluster's settings from its own config (the stager
    asks the cluster whether a lease's job still runs: apps/compute/backends/stager.py); the
    helper reads the owner from the directory itself."""
    try:
        return privileged.stager_evict(subtree=subtree, version_id=version_id)
    except privileged.HelperError as exc:
        logger.warning("dataset cache %s: version %s not evicted: %s", subtree, version_id, exc)
        return None


def _problem(problems: dict | None, path: Path, error: Exception) -> None:
    if problems is None:
        logger.warning("dataset cache %s: not swept: %s", path, error)
    else:
        problems[str(path)] = error


def node_sweep(
    *,
    node_dir: Path,
    cap: int,
    needed: int = 0,
    problems: dict | None = None,
) -> dict:
    """Evict the node's least recently used versions, whichever user's, until its cached bytes
    plus `needed` fit under `cap` (or nothing more can go: the rest are leased or being
    staged). What it found and did. A subtree that raises is left out (into `problems`,
    {path: error}, when given; else logged) and the others are swept."""
    try:  # the node's directory from the cache root, itself no link
        node_fd = tree.open_beneath(node_dir.parent, node_dir.name, directory=True)
    except (FileNotFoundError, tree.TreeRefused, NotADirectoryError):
        return {"bytes_before": 0, "bytes_after": 0, "evicted_versions": 0}
    try:
        subtrees = _subtrees(node_fd, node_dir)
    finally:
        os.close(node_fd)
    before, queue = 0, []
    for path, _info in subtrees:
        try:
            used, versions = _usage(path)
        except Exception as exc:  # this subtree's trouble: the others are swept
            _problem(problems, path, exc)
            continue
        before += used
        queue += [(mtime, str(path), version_id) for mtime, version_id in versions]
    queue.sort()
    after = before
    evicted = 0
    if before + needed > cap:
        for _mtime, path, version_id in queue:
            if after + needed <= cap:
                break
            try:
                freed = _evict_as_owner(Path(path), version_id)
            except Exception as exc:
                _problem(problems, Path(path), exc)
                freed = None
            if freed is not None:
                after -= freed
                evicted += 1
    return {"bytes_before": before, "bytes_after": after, "evicted_versions": evicted}


def cluster_sweep(*, cluster: Cluster, needed: int) -> None:
    """Before an attempt stages `needed` bytes: every node of the cluster under its cap (the
    nodes' caches are on this machine's disk here, as for `cache_dirs_ensure`). A node that
    cannot be swept, or a subtree of it, is counted and logged once (PASS), not fatal: its
    stager still keeps each user's own limit."""
    cap = settings.TORUS_DATASET_CACHE_NODE_BYTES
    root = Path(settings.TORUS_DATASET_CACHE_ROOT)
    for name in cluster.nodes.values_list("name", flat=True):
        if not NODE_RE.match(name):
            continue
        outcome, problems = None, {}
        with PASS.item(f"node:{cluster.name}/{name}", atomic=False):
            outcome = node_sweep(
                node_dir=root / name,
                cap=cap,
                needed=needed,
                problems=problems,
            )
        for path, error in problems.items():
            PASS.failed(key=f"subtree:{path}", error=error)
        below = f"subtree:{root / name}/"
        PASS.forget(keys=[k for k in PASS.open() if k.startswith(below) and k[8:] not in problems])
        if outcome is not None and outcome["evicted_versions"]:
            logger.info("dataset cache of node %s over its cap: %s", name, outcome)
