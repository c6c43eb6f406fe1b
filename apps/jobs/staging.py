"""Staging the dataset versions a job reads: the spec names them, submission resolves them,
dispatch hands each attempt a staging plan, and the attempt's stager
(apps/compute/backends/stager.py) puts them read-only in the node's cache (its directories
and cap: apps/jobs/node_cache.py) or points the job at shared storage; its reports are
recorded when the attempt ends.

    <attempt dir>/datasets.json            the plan (files, sha256, sources), 0440 the user's
                 /stager.py                the stager itself (the node needs nothing installed)
                 /datasets-<node>.env      TORUS_DATASET_<AS>=<path>, written by the stager
                 /dataset-cache-<node>.json  its report: hits, misses, bytes staged
"""

import json
import math
import re
import stat
import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction
from rest_framework import serializers

from apps.compute.backends import backend_class
from apps.compute.backends.base import SubmitRejected
from apps.compute.models import Cluster
from apps.core.actor import Actor
from apps.datasets.models import DatasetFile, DatasetVersion, VersionState
from apps.identity import privileged, tree
from apps.identity.storage import StorageError, tenant_root
from apps.jobs import paths
from apps.jobs.models import DatasetStage, JobAttempt
from apps.jobs.node_cache import NODE_RE, cache_dir_template, cache_dirs_ensure, cluster_sweep

STAGER = Path(__file__).resolve().parents[1] / "compute" / "backends" / "stager.py"
REF_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,63}):([1-9][0-9]{0,8})$")
URL_SECONDS = 7 * 24 * 3600  # the longest an S3 presigned URL may live
REPORT_MAX_BYTES = 256 * 1024
REPORT_RE = re.compile(r"^dataset-cache-.+\.json$")


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
    # The node cache is a directory on each node that the cluster's jobs reach; a cluster
    # without one (the backend's dataset_node_cache, or the config's) reads versions in place.
    node_cache = cluster.config.get("dataset_node_cache", backend_class(cluster).dataset_node_cache)
    cache = bool(job.spec.get("dataset_cache", True)) and bool(node_cache)
    if cache:
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
    # written into the attempt's directory (the user's) by the helper, read-only to the user
    try:
        privileged.files_write(
            files=[
                (target, json.dumps(plan).encode()),
                (target.with_name("stager.py"), STAGER.read_bytes()),
            ],
            uid=identity.uid,
            gid=identity.gid,
            mode=0o440,
        )
    except (OSError, privileged.HelperError) as exc:
        raise StorageError(f"cannot write {target}: {exc}") from exc
    attempt.dataset_versions.set(list(versions.values()))
    return target


def _read_report(dir_fd: int, name: str) -> dict | None:
    """A stager's report, written by the job's user: read below the attempt's directory with
    no link followed (apps/identity/tree.py), bounded, checked."""
    try:
        raw = tree.read_small(dir_fd, name, limit=REPORT_MAX_BYTES)
    except OSError:
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
    try:  # the attempt's directory from the tenant's root, no link followed on the way
        with tree.opened(tenant_root(attempt.job.tenant), directory, directory=True) as fd:
            listed = tree.entries(fd)
            reports = {
                name: _read_report(fd, name)
                for name, info in listed
                if stat.S_ISREG(info.st_mode) and REPORT_RE.match(name)
            }
    except OSError:
        return []
    for name, report in sorted(reports.items()):
        node = name[len("dataset-cache-") : -len(".json")]
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
