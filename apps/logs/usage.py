"""Each running job's CPU, memory (and GPU where its nodes report it) sampled every
TORUS_USAGE_SAMPLE_SECONDS into its metrics, beside its training metrics: `system/cpu_cores`
(cores busy since the last sample), `system/memory_gib` (resident now), `system/gpu_util` (%).
A sample's step is the seconds since the job was submitted, its stream `usage`.

The cluster's own accounting is read (Slurm: sstat, as each job's owner, through the helper),
one call per owner and cluster; what the samples say about a job that does nothing is
idleness.py's."""

import logging
import time
from collections import defaultdict
from datetime import UTC, datetime

from django.db.models import Sum

from apps.compute.backends import for_cluster
from apps.compute.backends.base import JobUsage
from apps.core.generations import redis_client
from apps.jobs.models import AttemptState, JobAttempt
from apps.logs import idleness
from apps.logs.live import publish_metrics
from apps.logs.metrics import Point, points_store
from apps.logs.models import LogCursor

logger = logging.getLogger(__name__)
STREAM = "usage"
GIB = 1024**3


def usage_pass(*, now: float | None = None) -> dict:
    """One sample of every running attempt the clusters report usage for, stored and told to
    the job's live viewers; then the idleness rules. Counts: sampled, stalled, idle, cancelled."""
    now = now or time.time()
    attempts = list(
        JobAttempt.objects.filter(state=AttemptState.RUNNING)
        .exclude(backend_id="")
        .select_related("job", "job__cluster", "job__project", "job__user__posix_account")
    )
    by_cluster = defaultdict(list)
    for attempt in attempts:
        account = getattr(attempt.job.user, "posix_account", None)
        if attempt.job.cluster_id and account is not None:
            by_cluster[attempt.job.cluster].append((attempt, (account.name, account.uid)))
    output = _output_bytes([attempt.pk for attempt in attempts])
    client = redis_client()
    sampled = [attempt.pk for owned in by_cluster.values() for attempt, _ in owned]
    states = idleness.states(client, attempt_ids=sampled)
    stats = {"sampled": 0, "stalled": 0, "idle": 0, "cancelled": 0}
    points: dict = {}  # job id -> its points of now
    for cluster, owned in by_cluster.items():
        try:
            found = for_cluster(cluster).usage(
                owners={attempt.backend_id: owner for attempt, owner in owned}
            )
        except Exception:  # one cluster's trouble is not the others'
            logger.exception("usage of cluster %s unread", cluster.name)
            continue
        for attempt, _owner in owned:
            usage = found.get(attempt.backend_id)
            if usage is None:
                continue
            last = states.get(attempt.pk, {})
            sample = _sample(attempt=attempt, usage=usage, last=last, now=now, points=points)
            sample["output"] = output.get(attempt.pk, 0)
            judged = idleness.judge(client, attempt=attempt, last=last, sample=sample, now=now)
            for outcome in judged:
                stats[outcome] += 1
            stats["sampled"] += 1
    if points:
        points_store([point for found in points.values() for point in found])  # one write
    for job_id, found in points.items():
        publish_metrics(job_id=job_id, points=found)
    return stats


def _output_bytes(attempt_ids: list) -> dict:
    """Bytes of output shipped so far, per attempt (its streams' cursors), in one query."""
    rows = (
        LogCursor.objects.filter(attempt_id__in=attempt_ids)
        .values("attempt_id")
        .annotate(total=Sum("offset"))
    )
    return {row["attempt_id"]: row["total"] or 0 for row in rows}


def _sample(*, attempt: JobAttempt, usage: JobUsage, last: dict, now: float, points: dict) -> dict:
    """The attempt's points of now (added to `points` by job) and what idleness judges it by:
    cores busy since the last sample (`last`, since the start for the first one), the GPU's
    use."""
    since, cpu_before = last.get("t"), last.get("cpu")
    if since is None or cpu_before is None or now <= since:
        started = (attempt.started_at or attempt.created_at).timestamp()
        since, cpu_before = min(started, now - 1), 0.0
    cores = max(0.0, (usage.cpu_seconds - cpu_before) / (now - since))
    values = {"system/cpu_cores": round(cores, 3), "system/memory_gib": usage.memory_bytes / GIB}
    if usage.gpu_util is not None:
        values["system/gpu_util"] = usage.gpu_util
    job = attempt.job
    step = int(now - job.created_at.timestamp())
    stamp = datetime.fromtimestamp(now, tz=UTC).isoformat()
    points[job.pk] = [
        Point(str(job.pk), str(attempt.pk), STREAM, int(now), step, name, value, stamp)
        for name, value in values.items()
    ]
    return {"cores": cores, "gpu": usage.gpu_util, "cpu_seconds": usage.cpu_seconds}
