"""The node-wide cap of the dataset cache: the least recently used versions of every user's
subtree on a node go first when the node as a whole is over TORUS_DATASET_CACHE_NODE_BYTES.

Each user's subtree keeps its own limit (the stager's, TORUS_DATASET_CACHE_BYTES); only root
sees every subtree of a node. The sweep runs as root in the worker, at dispatch (before the
attempt's stager may add to the node) for every node of the cluster, as `cache_dirs_ensure`
does. Root only reads here, without following a link (sizes, and when each version was last
used); each eviction is done by the subtree's own user (`stager.py evict`, under that
subtree's locks and leases), so a link planted in a subtree reaches nothing its user could
not reach anyway.
"""

import json
import logging
import os
import stat
import subprocess
from pathlib import Path

from django.conf import settings

from apps.compute.backends.stager import ID_RE
from apps.compute.models import Cluster
from apps.jobs.datasets import NODE_RE, STAGER

logger = logging.getLogger(__name__)

PYTHON = "/usr/bin/python3"


def _real_dir(path: Path) -> os.stat_result | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info if stat.S_ISDIR(info.st_mode) else None


def _subtrees(node_dir: Path) -> list[tuple[Path, os.stat_result]]:
    """<node>/<tenant>/<project>/<uid>: real directories owned by that uid, closed to others."""
    found = []
    for tenant in os.scandir(node_dir):
        if not tenant.is_dir(follow_symlinks=False):
            continue
        for project in os.scandir(tenant.path):
            if not project.is_dir(follow_symlinks=False):
                continue
            for user in os.scandir(project.path):
                info = _real_dir(Path(user.path))
                if (
                    info is not None
                    and user.name.isdigit()
                    and info.st_uid == int(user.name) != 0
                    and not info.st_mode & 0o077
                ):
                    found.append((Path(user.path), info))
    return found


def _used_bytes(subtree: Path) -> int:
    total = 0
    if not _real_dir(subtree / "blobs"):  # os.walk would follow a link at the top
        return 0
    for dirpath, _dirs, files in os.walk(subtree / "blobs"):  # links below are not followed
        for name in files:
            try:
                info = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def _versions(subtree: Path) -> list[tuple[float, str]]:
    """(last used, version id) of the subtree's cached versions."""
    if not _real_dir(subtree / "versions"):
        return []
    try:
        entries = list(os.scandir(subtree / "versions"))
    except OSError:
        return []
    return [
        (entry.stat(follow_symlinks=False).st_mtime, entry.name)
        for entry in entries
        if entry.is_dir(follow_symlinks=False) and ID_RE.match(entry.name)
    ]


def _evict_as_owner(
    subtree: Path, info: os.stat_result, version_id: str, *, slurm_conf: str
) -> int | None:
    """The subtree's user drops one version: the bytes freed, None when it was kept. It runs
    with the groups of the directories above its subtree (the tenant's and the project's,
    as its jobs do) and reads the stager from stdin (the node's python3, as the launcher
    runs it; the platform's checkout need not be readable to it). `slurm_conf`: where its
    `squeue` finds the cluster, to tell an ended job's lease from a live one."""
    groups = sorted({os.lstat(subtree.parent).st_gid, os.lstat(subtree.parent.parent).st_gid})
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    result = subprocess.run(  # noqa: S603 (the stager, argv items only)
        [PYTHON, "-I", "-", "evict", str(subtree), version_id],
        input=STAGER.read_text(),
        user=info.st_uid,
        group=info.st_gid,
        extra_groups=groups,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        return None
    try:
        return json.loads(result.stdout)["freed"]
    except (ValueError, KeyError):
        return None


def node_sweep(*, node_dir: Path, cap: int, needed: int = 0, slurm_conf: str = "") -> dict:
    """Evict the node's least recently used versions, whichever user's, until its cached bytes
    plus `needed` fit under `cap` (or nothing more can go: the rest are leased or being
    staged). What it found and did."""
    subtrees = _subtrees(node_dir) if _real_dir(node_dir) else []
    before = after = sum(_used_bytes(path) for path, _info in subtrees)
    evicted = 0
    if before + needed > cap:
        owners = dict(subtrees)
        queue = sorted(
            (mtime, str(path), version_id)
            for path, _info in subtrees
            for mtime, version_id in _versions(path)
        )
        for _mtime, path, version_id in queue:
            if after + needed <= cap:
                break
            freed = _evict_as_owner(
                Path(path), owners[Path(path)], version_id, slurm_conf=slurm_conf
            )
            if freed is not None:
                after -= freed
                evicted += 1
    return {"bytes_before": before, "bytes_after": after, "evicted_versions": evicted}


def cluster_sweep(*, cluster: Cluster, needed: int) -> None:
    """Before an attempt stages `needed` bytes: every node of the cluster under its cap (the
    nodes' caches are on this machine's disk here, as for `cache_dirs_ensure`). A node that
    cannot be swept is logged, not fatal: its stager still keeps each user's own limit."""
    cap = settings.TORUS_DATASET_CACHE_NODE_BYTES
    root = Path(settings.TORUS_DATASET_CACHE_ROOT)
    for name in cluster.nodes.values_list("name", flat=True):
        if not NODE_RE.match(name):
            continue
        try:
            outcome = node_sweep(
                node_dir=root / name,
                cap=cap,
                needed=needed,
                slurm_conf=cluster.config.get("slurm_conf", ""),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("dataset cache of node %s not swept: %s", name, exc)
            continue
        if outcome["evicted_versions"]:
            logger.info("dataset cache of node %s over its cap: %s", name, outcome)
