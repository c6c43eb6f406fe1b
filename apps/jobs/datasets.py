"""Jobs read dataset versions: the spec names them, submission resolves them, dispatch hands
each attempt a staging plan, and the attempt's stager (apps/compute/backends/stager.py) puts
them read-only in the node's cache or points the job at shared storage.

    <attempt dir>/datasets.json            the plan (files, sha256, sources), 0440 the user's
                 /stager.py                the stager itself (the node needs nothing installed)
                 /datasets-<node>.env      TORUS_DATASET_<AS>=<path>, written by the stager
                 /dataset-cache-<node>.json  its report: hits, misses, bytes staged

The node cache (settings.TORUS_DATASET_CACHE_ROOT) is made here, by the root worker, for
every node of the cluster; other tenants cannot traverse it and only the user's jobs read
their subtree:

    <cache root>/<node>/                  root            0755
      <tenant>/                           root:t-<tenant> 0750
        <project>/                        root:p-<t>_<p>  0750
          <uid>/                          <user>:p-<t>_<p> 0700  the stager's cache
"""

import json
import math
import os
import re
import shutil
import stat
import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction
from rest_framework import serializers

from apps.compute.backends.base import SubmitRejected
from apps.compute.models import Backend as BackendKind
from apps.compute.models import Cluster
from apps.core.actor import Actor
from apps.datasets.models import DatasetFile, DatasetVersion, VersionState
from apps.identity.storage import StorageError
from apps.jobs import paths
from apps.jobs.models import DatasetStage, JobAttempt

STAGER = Path(__file__).resolve().parents[1] / "compute" / "backends" / "stager.py"
REF_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,63}):([1-9][0-9]{0,8})$")
NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
URL_SECONDS = 7 * 24 * 3600  # the longest an S3 presigned URL may live
REPORT_MAX_BYTES = 256 * 1024


def version_problem(ref: str) -> str | None:
    """Why `ref` is neither '<dataset name>:<number>' nor a version UUID, or None."""
    if REF_RE.match(ref):
        return None
    try:
        uuid.UUID(ref)
    except ValueError:
        return "Give '<dataset name>:<version number>' or a version id."
    return None


def datasets_resolve(*, actor: Actor, project, refs: list[dict]) -> list[dict]:
    """The spec's dataset entries with each version looked up: committed, in the job's
    project, visible to the submitter. A 400 naming the entry otherwise; nothing written."""
    if not refs:
        return []
    visible = DatasetVersion.objects.visible_to(actor).filter(dataset__project=project)
    resolved, errors = [], {}
    for index, ref in enumerate(refs):
        match = REF_RE.match(ref["version"])
        if match:
            found = visible.filter(dataset__name=match.group(1), number=int(match.group(2)))
        else:
            found = visible.filter(pk=ref["version"])
        version = found.select_related("dataset").first()
        if version is None:
            errors[str(index)] = {"version": ["No such dataset version in this project."]}
        elif version.state != VersionState.COMMITTED:
            errors[str(index)] = {"version": ["This version is not committed yet."]}
        else:
            resolved.append({"version": str(version.pk), "ref": str(version), "as": ref["as"]})
    if errors:
        raise serializers.ValidationError({"datasets": errors})
    return resolved


def plan_path(job, number: int) -> Path:
    return paths.attempt_dir(job, number) / "datasets.json"


def _directory(path: Path, *, uid: int, gid: int, mode: int) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise StorageError(f"{path} exists and is not a directory") from None
    except OSError as exc:
        raise StorageError(f"cannot make {path}: {exc.strerror}") from exc
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, mode)


def cache_dir_template(job, identity) -> str:
    """The user's cache subtree on a node, with '{node}' for the node's name."""
    root = Path(settings.TORUS_DATASET_CACHE_ROOT)
    return str(root / "{node}" / job.tenant.slug / job.project.slug / str(identity.uid))


def cache_dirs_ensure(*, cluster: Cluster, job, identity) -> None:
    """The user's cache subtree on every node of the cluster (here the nodes share this
    machine's disk; on a site with many machines the same runs on each node)."""
    root = Path(settings.TORUS_DATASET_CACHE_ROOT)
    try:
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)  # noqa: S103 (jobs of every tenant enter their subtree)
    except OSError as exc:
        raise StorageError(f"cannot make the dataset cache root {root}: {exc.strerror}") from exc
    for name in cluster.nodes.values_list("name", flat=True):
        if not NODE_RE.match(name):
            continue
        node = root / name
        _directory(node, uid=0, gid=0, mode=0o755)
        tenant = node / job.tenant.slug
        _directory(tenant, uid=0, gid=identity.tenant_gid, mode=0o750)
        project = tenant / job.project.slug
        _directory(project, uid=0, gid=identity.gid, mode=0o750)
        _directory(project / str(identity.uid), uid=identity.uid, gid=identity.gid, mode=0o700)


def _version_entry(version: DatasetVersion, ref: dict, files: list[dict]) -> dict:
    from apps.datasets.storage import storage_for

    storage = storage_for(version.storage_kind)
    entry = {"id": str(version.pk), "as": ref["as"], "ref": ref["ref"]}
    entry["storage"] = version.storage_kind
    if version.storage_kind == "posix":
        entry["root"] = str(storage.local_path(key=version.storage_prefix))
        entry["files"] = files
    else:  # S3: presigned GETs; the job never holds the platform's credentials
        entry["root"] = ""
        entry["files"] = [
            {
                **f,
                "url": storage.download_url(key=version.file_key(f["path"]), expires_s=URL_SECONDS),
            }
            for f in files
        ]
    return entry


def attempt_datasets_prepare(*, attempt: JobAttempt, cluster: Cluster, identity) -> Path | None:
    """Write the attempt's staging plan and the stager into its directory, make the cache
    subtrees, and record which versions the attempt reads. None when it reads none."""
    job = attempt.job
    refs = job.spec.get("datasets") or []
    if not refs:
        return None
    versions = {
        str(v.pk): v
        for v in DatasetVersion.objects.filter(
            pk__in=[r["version"] for r in refs],
            state=VersionState.COMMITTED,
            dataset__project_id=job.project_id,
        ).select_related("dataset__project__tenant")
    }
    gone = [r["ref"] for r in refs if r["version"] not in versions]
    if gone:
        raise SubmitRejected(f"dataset version {', '.join(gone)} no longer exists")
    files: dict[str, list[dict]] = {key: [] for key in versions}
    for row in (
        DatasetFile.objects.filter(version_id__in=list(versions))
        .order_by("version_id", "path")
        .values("version_id", "path", "size", "sha256")
    ):
        files[str(row.pop("version_id"))].append(row)
    # The node cache is a directory on each node that Slurm jobs reach; a cluster without
    # one (Kubernetes: pods mount only the project's volume) reads versions in place.
    node_cache = cluster.config.get("dataset_node_cache", cluster.backend == BackendKind.SLURM)
    cache = bool(job.spec.get("dataset_cache", True)) and bool(node_cache)
    if cache:
        from apps.jobs.node_cache import cluster_sweep

        cache_dirs_ensure(cluster=cluster, job=job, identity=identity)
        needed = sum(f["size"] for key in versions for f in files[key])
        cluster_sweep(cluster=cluster, needed=needed)
    minutes = job.spec["resources"]["time_limit"]
    plan = {
        "out_dir": str(paths.attempt_dir(job, attempt.number)),
        "cache": cache,
        "note": "" if cache or not node_cache else "no node cache on this cluster",
        "cache_dir": cache_dir_template(job, identity),
        "limit_bytes": settings.TORUS_DATASET_CACHE_BYTES,
        "lease_s": minutes * 60 + 600,  # the files stay while the job may still read them
        "datasets": [_version_entry(versions[r["version"]], r, files[r["version"]]) for r in refs],
    }
    target = plan_path(job, attempt.number)
    for path, write in (
        (target, lambda p: p.write_text(json.dumps(plan))),
        (target.with_name("stager.py"), lambda p: shutil.copyfile(STAGER, p)),
    ):
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            tmp.unlink(missing_ok=True)
            write(tmp)
            os.chown(tmp, identity.uid, identity.gid)
            os.chmod(tmp, 0o440)
            os.replace(tmp, path)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror}") from exc
    attempt.dataset_versions.set(list(versions.values()))
    return target


def _read_report(path: Path) -> dict | None:
    """A stager's report, written by the job's user: no symlinks, bounded, checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        raw = handle.read(REPORT_MAX_BYTES + 1)
    if len(raw) > REPORT_MAX_BYTES:
        return None
    try:
        report = json.loads(raw)
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def _count(value) -> int:
    return value if isinstance(value, int) and 0 <= value < 2**62 else 0


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and 0 <= value < 1e9


def _version_summary(item) -> dict | None:
    if not isinstance(item, dict):
        return None
    summary = {key: _count(item.get(key)) for key in ("hits", "misses", "bytes_staged")}
    summary["as"] = str(item.get("as", ""))[:32]
    summary["mode"] = str(item.get("mode", ""))[:32]
    return summary


def dataset_stages_record(*, attempt: JobAttempt) -> list[DatasetStage]:
    """Record the stagers' reports of an attempt (one per node); safe to run twice."""
    if not attempt.job.spec.get("datasets"):
        return []
    directory = paths.attempt_dir(attempt.job, attempt.number)
    stages = []
    try:
        names = sorted(p.name for p in directory.glob("dataset-cache-*.json"))
    except OSError:
        return []
    for name in names:
        node = name[len("dataset-cache-") : -len(".json")]
        report = _read_report(directory / name)
        if report is None or not NODE_RE.match(node):
            continue
        seconds = report.get("seconds")
        versions = report.get("versions") if isinstance(report.get("versions"), list) else []
        stages.append(
            DatasetStage(
                attempt=attempt,
                node=node,
                cache=bool(report.get("cache")),
                note=str(report.get("note") or "")[:255],
                hits=min(_count(report.get("hits")), 2**31 - 1),
                misses=min(_count(report.get("misses")), 2**31 - 1),
                bytes_staged=_count(report.get("bytes_staged")),
                bytes_hit=_count(report.get("bytes_hit")),
                evicted_bytes=_count(report.get("evicted_bytes")),
                seconds=float(seconds) if _finite(seconds) else 0.0,
                versions=[s for s in map(_version_summary, versions[:64]) if s],
            )
        )
    with transaction.atomic():
        DatasetStage.objects.filter(attempt=attempt).delete()
        DatasetStage.objects.bulk_create(stages)
    return stages
