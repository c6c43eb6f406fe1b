"""When each waiting job is expected to start: a point from the queue played forward, and a
range calibrated on how far past predictions missed.

Each control pass, per cluster (estimates_refresh):
1. the running jobs' ends are predicted from similar past runs (apps/jobs/runtimes.py), not
   their time limits;
2. the waiting jobs (PENDING, QUEUED, SUBMITTED, RESTARTING) are put in the order admission
   and the cluster's queue take them (apps/jobs/priority.order_key) and played forward on the
   partitions' healthy capacity under the tenants' GPU quotas (apps/jobs/queue_model.py);
3. each point becomes a range by split conformal calibration on the log of the wait: every
   job's first prediction is kept, and when the job starts, log((actual wait + S) /
   (predicted wait + S)) joins the cluster's last RESIDUALS_KEPT residuals; p10/p50/p90 are the
   predicted wait scaled by those residuals' 10th, 50th and 90th percentiles. Until
   CALIBRATION_MIN residuals exist the range is 0.5x to 2x, and says it is uncalibrated.
A job that cannot start (over a hard quota, bigger than its partition's healthy nodes) gets the
reason instead of a time. The results live in Redis, one hash per cluster replaced whole each
pass: the API reads the page's jobs with one HMGET per cluster (estimates_read).
"""

import bisect
import contextlib
import gc
import json
import math
import statistics
from datetime import UTC, datetime
from typing import NamedTuple

from django.db import connection
from django.db.models import CharField, FloatField, Sum
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Extract
from django.utils import timezone

from apps.compute.backends.slurm_words import node_healthy
from apps.compute.models import Cluster, Node, Partition
from apps.core import telemetry
from apps.core.generations import counter_key, redis_client
from apps.jobs import extras, queue_model, runtimes
from apps.jobs.admission import RESOURCES, quota_scope
from apps.jobs.models import AttemptState, Job, JobAttempt
from apps.jobs.priority import in_order
from apps.jobs.states import ACTIVE, State
from apps.quotas.models import Quota

WAITING = (State.PENDING, State.QUEUED, State.SUBMITTED, State.RESTARTING)
SMOOTH_SECONDS = 60.0  # S: a 10 s miss on a 5 s wait is not a 3x miss
BINS = (60.0, 600.0, 3600.0)  # predicted waits calibrated apart: < 1 min, < 10 min, < 1 h, more
CALIBRATION_MIN = 20
RESIDUALS_KEPT = 1000
UNCALIBRATED = (math.log(0.5), 0.0, math.log(2.0))
META = "_"  # the hash's field that holds what its entries share
SWEEP_SLACK = 1000

OUTCOMES = telemetry.counter(
    "torus_start_estimates",
    "Jobs that started, by where the start fell against the p10-p90 range first predicted for"
    " them: within, early or late (coverage = within / all; the aim is 80%)",
    labels=("cluster", "outcome"),
)


class Queued(NamedTuple):
    """What the estimate reads of a job: a row, not a model (10,000 a pass), with its ids as
    text (a UUID is made and hashed in Python, a str in C: the model looks them up 10^5
    times)."""

    id: str
    tenant: str
    project_id: str
    user_id: int
    name: str
    priority: int
    created_at: datetime
    state: str
    state_reason: str
    gpus: int
    cpus: int
    memory_mb: int
    partition: str
    spec: dict  # {"resources": {"time_limit": minutes}}: what priority and runtimes read


def _key(kind: str, cluster_id) -> str:
    return counter_key(f"estimates:{kind}:{cluster_id}")


def _text(field: str) -> Cast:
    return Cast(field, output_field=CharField())


def _epoch(field: str) -> Cast:
    return Cast(Extract(field, "epoch"), output_field=FloatField())  # (a float in SQL too)


def _rows(queryset, prefix: str = "") -> list[Queued]:
    """The jobs as Queued rows, fetched through the cursor (Django's row iterator costs as
    much again as the fetch at 10,000 rows)."""
    fields = ("user_id", "name", "priority", "state", "state_reason")
    fields = (*fields, "gpus", "cpus", "memory_mb", "partition")
    sql, params = queryset.values_list(
        *(_text(prefix + field) for field in ("pk", "tenant_id", "project_id")),
        *(prefix + field for field in fields),
        _epoch(f"{prefix}created_at"),
        KeyTextTransform("time_limit", KeyTransform("resources", f"{prefix}spec")),
    ).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    when, specs = datetime.fromtimestamp, {}  # one spec per time limit, shared (read only)
    return [
        Queued._make(
            (
                *row[:6],
                when(row[12], UTC),
                *row[6:12],
                specs.get(row[13]) or specs.setdefault(row[13], _spec(row[13])),
            )
        )
        for row in rows
    ]


def _spec(time_limit) -> dict:
    return {"resources": {"time_limit": int(time_limit or 60)}}


def estimates_refresh(*, cluster_id, now: datetime | None = None) -> dict:
    """Predict every waiting job's start on this cluster and store it; learn from the jobs
    that started since the last pass. Returns counts for the pass's log."""
    with _collector_paused():
        return _refresh(cluster_id=cluster_id, now=now)


@contextlib.contextmanager
def _collector_paused():
    """A pass makes some 10^5 objects that live until it ends and form no cycle; the cyclic
    collector would walk the worker's whole heap for them several times (100 ms of 350 at
    10,000 jobs, bench/estimates.py). They are freed by their counts as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _refresh(*, cluster_id, now: datetime | None) -> dict:
    client = redis_client()
    if client is None:
        return {}
    now = now or timezone.now()
    clock = now.timestamp()
    waiting = _rows(Job.objects.filter(cluster_id=cluster_id, state__in=WAITING))
    name = Cluster.objects.filter(pk=cluster_id).values_list("name", flat=True).first() or ""
    last = client.hget(_key("now", cluster_id), META)
    since = json.loads(last)["computed_at"] if last else None
    learned = _learn(client, cluster_id=cluster_id, cluster_name=name, since=since)
    ids = {j.id for j in waiting}
    _forget_gone(client, cluster_id=cluster_id, waiting=ids)
    overdue = waiting_too_long(client, cluster_id=cluster_id, waiting=ids, clock=clock)
    known = runtimes.history(now=now)
    pools = _pools(cluster_id)
    quotas = _quotas({job.tenant for job in waiting})
    limits = {t: q.gpus for t, qs in quotas.items() for q in qs if _tenant_wide(q) and q.gpus}
    running = []
    attempts = JobAttempt.objects.filter(job__cluster_id=cluster_id, state=AttemptState.RUNNING)
    started = dict(attempts.values_list(_text("job_id"), _epoch("started_at")))
    for job in _rows(attempts, prefix="job__"):
        ran = clock - (started.get(job.id) or clock)
        left = runtimes.remaining_seconds(job, known, ran=ran)
        running.append(
            queue_model.Running(job.partition, job.tenant, job.gpus, job.cpus, clock + left)
        )
    order = in_order(waiting, now=now)
    bases: dict[str, int] = {}  # basis words -> their number in the meta field
    basis_of, cannot, model_jobs = [], [], []
    predicted, refused = {}, {}  # by shape: most jobs share theirs with many others
    waiting_model = queue_model.Waiting
    for index, job in enumerate(order):
        shape = (job.user_id, job.project_id, job.name, job.spec["resources"]["time_limit"])
        known_shape = predicted.get(shape)
        if known_shape is None:
            seconds, words = runtimes.predicted_seconds(job, known)
            known_shape = predicted[shape] = seconds, bases.setdefault(words, len(bases))
        basis_of.append(known_shape[1])
        if job.tenant in quotas or job.state == State.PENDING:  # (else only the pool can)
            shape = (*shape[:2], job.tenant, job.partition, job.gpus, job.cpus, job.memory_mb)
            shape = (*shape, job.state == State.PENDING and job.state_reason)
            if shape not in refused:
                refused[shape] = _cannot_start(job, pools, quotas.get(job.tenant, []))
            reason = refused[shape]
        else:
            reason = _too_big(job, pools.get(job.partition))
        cannot.append(reason)
        if not reason:
            model_jobs.append(
                waiting_model(index, job.partition, job.tenant, job.gpus, job.cpus, known_shape[0])
            )
    starts = queue_model.simulate(
        now=clock,
        pools=pools,
        running=running,
        waiting=model_jobs,
        tenant_limits=limits,
        tenant_held_elsewhere=_held_elsewhere(cluster_id, set(limits)),
    )
    factors, calibrated = _calibration(client, cluster_id)
    meta = {"computed_at": clock, "factors": factors, "bases": list(bases), "range": calibrated}
    meta["pools"] = _pool_summaries(pools, running, model_jobs, starts, clock=clock)
    estimates = {META: json.dumps(meta, ensure_ascii=False)}
    firsts = {}
    for index, job in enumerate(order):
        start = starts.get(index)
        reason = cannot[index] or ("" if start is not None else "no capacity frees up for it")
        if reason:
            estimates[job.id] = f"! {reason}"
            continue
        wait = start - clock  # the range is made from it as it is read (_readable)
        estimates[job.id] = f"{wait:.0f} {basis_of[index]}"
        if since is None or job.created_at.timestamp() >= since:  # new since the last pass
            p10, _, p90 = _range(clock, wait, factors)
            firsts[job.id] = f"{clock:.1f} {wait:.1f} {p10:.0f} {p90:.0f}"
    _store(client, cluster_id=cluster_id, estimates=estimates, firsts=firsts)
    if overdue:  # told after the pass's writes (a notifier that fails loses no estimate)
        extras.overdue(job_ids=overdue)
    estimated = len(estimates) - 1 - sum(1 for reason in cannot if reason)
    return {"waiting": len(waiting), "estimated": estimated, "learned": learned}


def _pool_summaries(pools: dict, running: list, waiting: list, starts: dict, *, clock) -> dict:
    """Per partition, for placing a new job (soonest): what is free once the jobs that start
    now have started, when its queue is predicted to have started its last job, and how many
    wait there."""
    summaries = {
        name: {"free": [pool.gpus, pool.cpus], "drain_at": clock, "waiting": 0}
        for name, pool in pools.items()
    }
    for job in running:
        if job.pool in summaries:
            free = summaries[job.pool]["free"]
            free[0], free[1] = free[0] - job.gpus, free[1] - job.cpus
    for job in waiting:
        summary, start = summaries[job.pool], starts.get(job.key)
        summary["waiting"] += 1
        if start is None:
            continue
        if start <= clock:
            free = summary["free"]
            free[0], free[1] = free[0] - job.gpus, free[1] - job.cpus
        summary["drain_at"] = max(summary["drain_at"], start)
    return summaries


def soonest(*, options: list[tuple], gpus: int, cpus: int) -> tuple[int, str]:
    """Which of `options` ((cluster, partition) pairs) a new job needing `gpus` and `cpus`
    is expected to start on soonest, from the last pass's summaries (one Redis round trip),
    and why, in words: at once where enough is free, else behind the partition's queue."""
    client = redis_client()
    metas = [None] * len(options)
    if client is not None:
        with client.pipeline(transaction=False) as pipe:
            for cluster, _ in options:
                pipe.hget(_key("now", cluster.pk), META)
            metas = pipe.execute()
    now = timezone.now().timestamp()
    waits, words = [], []
    for (cluster, partition), meta in zip(options, metas, strict=True):
        pool = json.loads(meta).get("pools", {}).get(partition) if meta else None
        where = f"{cluster.name}/{partition}"
        if not cluster.healthy:
            waits.append(math.inf)
            words.append(f"{where} does not answer")
        elif pool is None:
            waits.append(math.inf)
            words.append(f"{where} not estimated yet")
        elif pool["free"][0] >= gpus and pool["free"][1] >= cpus:
            waits.append(0.0)
            words.append(f"{where} at once ({pool['free'][0]} GPUs free)")
        else:
            wait = max(0.0, pool["drain_at"] - now)
            waits.append(wait)
            words.append(f"{where} in ~{_minutes(wait)} (behind {pool['waiting']} waiting)")
    best = min(range(len(options)), key=lambda i: (waits[i], i))
    others = "; ".join(words[i] for i in range(len(options)) if i != best)
    return best, f"expected to start soonest here: {words[best]}; elsewhere: {others}"


def _minutes(seconds: float) -> str:
    minutes = seconds / 60
    if minutes < 90:
        return f"{max(1, round(minutes))} min"
    if minutes < 48 * 60:
        return f"{round(minutes / 60)} h"
    return f"{round(minutes / 1440)} d"


def estimates_read(*, jobs) -> dict[str, dict]:
    """{job id: expected_start} for the waiting ones among `jobs`, one HMGET per cluster;
    ISO times, as the API gives them."""
    client = redis_client()
    by_cluster: dict = {}
    for job in jobs:
        if job.state in WAITING and job.cluster_id:
            by_cluster.setdefault(job.cluster_id, []).append(str(job.pk))
    if client is None or not by_cluster:
        return {}
    with client.pipeline(transaction=False) as pipe:
        for cluster_id, ids in by_cluster.items():
            pipe.hmget(_key("now", cluster_id), [META, *ids])
        answers = pipe.execute()
    found = {}
    for ids, (meta, *values) in zip(by_cluster.values(), answers, strict=True):
        if meta is None:
            continue
        meta = json.loads(meta)
        for job_id, raw in zip(ids, values, strict=True):
            if raw is not None:
                found[job_id] = _readable(raw.decode(), meta)
    return found


def _readable(stored: str, meta: dict) -> dict:
    computed_at = _iso(meta["computed_at"])
    if stored.startswith("! "):
        return {
            **dict.fromkeys(("p10", "p50", "p90")),
            "computed_at": computed_at,
            "basis": "",
            "cannot_start": stored[2:],
        }
    wait, basis = stored.split()
    p10, p50, p90 = _range(meta["computed_at"], float(wait), meta["factors"])
    return {
        "p10": _iso(p10),
        "p50": _iso(p50),
        "p90": _iso(p90),
        "computed_at": computed_at,
        "basis": (
            f"the queue played forward, its run time from {meta['bases'][int(basis)]};"
            f" running jobs' ends from their past runs; range {meta['range'][_bin(float(wait))]}"
        ),
        "cannot_start": "",
    }


def _range(clock: float, wait: float, factors_by_bin: list) -> tuple[float, float, float]:
    """p10, p50 and p90 of a start predicted `wait` seconds after `clock`: the wait, smoothed,
    scaled by its bin's calibration factors (never before `clock`)."""
    smoothed = wait + SMOOTH_SECONDS
    factors = factors_by_bin[_bin(wait)]
    return tuple(clock + max(0.0, smoothed * factor - SMOOTH_SECONDS) for factor in factors)


def _iso(value) -> str:
    return datetime.fromtimestamp(float(value), UTC).isoformat()


def _bin(wait: float) -> int:
    """The calibration's bin of a predicted wait (Mondrian conformal: a start predicted for
    now and one predicted hours away miss by different amounts, and the first are many)."""
    return bisect.bisect_right(BINS, wait)


def _calibration(client, cluster_id) -> tuple[list, list]:
    """Per bin, the factors for p10, p50 and p90 and the words for where they come from: the
    bin's residuals, or every bin's while the bin has too few."""
    with client.pipeline(transaction=False) as pipe:
        for index in range(len(BINS) + 1):
            pipe.lrange(_key(f"residuals:{index}", cluster_id), 0, -1)
        by_bin = [[float(r) for r in rows] for rows in pipe.execute()]
    pooled = [r for rows in by_bin for r in rows]
    found = [_scale(rows if len(rows) >= CALIBRATION_MIN else pooled) for rows in by_bin]
    return [factors for factors, _ in found], [words for _, words in found]


def _scale(residuals: list[float]) -> tuple[tuple, str]:
    """The factors for p10, p50 and p90, and the words for where they come from."""
    if len(residuals) < CALIBRATION_MIN:
        return tuple(math.exp(r) for r in UNCALIBRATED), (
            f"0.5x-2x, uncalibrated ({len(residuals)} of {CALIBRATION_MIN} past starts seen)"
        )
    cuts = statistics.quantiles(residuals, n=10, method="inclusive")
    factors = (math.exp(cuts[0]), math.exp(statistics.median(residuals)), math.exp(cuts[-1]))
    return factors, f"calibrated on {len(residuals)} past starts"


def _store(client, *, cluster_id, estimates: dict, firsts: dict) -> None:
    """Replace the cluster's estimates whole (a temporary key renamed: readers never see half
    of a pass); add the first predictions of the jobs new to the queue."""
    now_key, first_key = _key("now", cluster_id), _key("first", cluster_id)
    with client.pipeline(transaction=False) as pipe:
        temporary = f"{now_key}:next"  # (always the meta field: read by soonest)
        pipe.delete(temporary)
        pipe.hset(temporary, mapping=estimates)
        pipe.rename(temporary, now_key)
        for job_id, first in firsts.items():  # (never over the first one)
            pipe.hsetnx(first_key, job_id, first)
        if firsts:  # when each is overdue: its first p90 (waiting_too_long)
            due = {job_id: float(first.split()[3]) for job_id, first in firsts.items()}
            pipe.zadd(_key("due", cluster_id), due, nx=True)
        pipe.execute()


def _learn(client, *, cluster_id, cluster_name: str, since: float | None) -> int:
    """The attempts that started on the cluster since the last pass (`since`; all the first
    pass): each of a job with a first prediction adds its residual and its coverage outcome,
    and the prediction is dropped. Returns how many were learned."""
    first_key = _key("first", cluster_id)
    attempts = JobAttempt.objects.filter(job__cluster_id=cluster_id, started_at__isnull=False)
    if since is not None:
        attempts = attempts.filter(started_at__gte=datetime.fromtimestamp(since - 5, UTC))
    started = dict(attempts.values_list(_text("job_id"), _epoch("started_at")))
    if not started:
        return 0
    ids = list(started)
    firsts = dict(zip(ids, client.hmget(first_key, ids), strict=True))
    residuals = []
    for job_id, first in firsts.items():
        if first is None:
            continue
        at, wait, p10, p90 = (float(x) for x in first.split())
        actual = started[job_id]
        if actual < at - 1:
            continue  # a start from before this wait
        residual = math.log((actual - at + SMOOTH_SECONDS) / (wait + SMOOTH_SECONDS))
        residuals.append((_bin(wait), residual))
        outcome = "early" if actual < p10 - 1 else "late" if actual > p90 + 1 else "within"
        telemetry.add(OUTCOMES, cluster=cluster_name, outcome=outcome)
    learned = [job_id for job_id, first in firsts.items() if first is not None]
    if learned:
        with client.pipeline(transaction=False) as pipe:
            for index, residual in residuals:
                residuals_key = _key(f"residuals:{index}", cluster_id)
                pipe.lpush(residuals_key, residual)
                pipe.ltrim(residuals_key, 0, RESIDUALS_KEPT - 1)
            pipe.hdel(first_key, *learned)
            pipe.zrem(_key("due", cluster_id), *learned)
            pipe.execute()
    return len(residuals)


def _forget_gone(client, *, cluster_id, waiting: set[str]) -> None:
    """Drop the first predictions of jobs that left the queue without starting (cancelled,
    failed at dispatch): swept once they outnumber the waiting jobs by SWEEP_SLACK."""
    first_key = _key("first", cluster_id)
    if client.hlen(first_key) <= len(waiting) + SWEEP_SLACK:
        return
    gone = [key for key in client.hkeys(first_key) if key.decode() not in waiting]
    if gone:
        client.hdel(first_key, *gone)
        client.zrem(_key("due", cluster_id), *gone)


def waiting_too_long(client, *, cluster_id, waiting: set[str], clock: float) -> list[str]:
    """The jobs still waiting past the p90 first predicted for them, each once (taken off the
    cluster's due set as they are returned; one that left the queue meanwhile is dropped)."""
    due_key = _key("due", cluster_id)
    due = [key.decode() for key in client.zrangebyscore(due_key, "-inf", clock)]
    if not due:
        return []
    client.zrem(due_key, *due)
    return [job_id for job_id in due if job_id in waiting]


def _pools(cluster_id) -> dict[str, queue_model.Pool]:
    """Each partition's GPUs and CPUs on its healthy nodes."""
    nodes = {n.name: n for n in Node.objects.filter(cluster_id=cluster_id) if node_healthy(n.state)}
    pools = {}
    for partition in Partition.objects.filter(cluster_id=cluster_id):
        members = [nodes[name] for name in partition.node_names if name in nodes]
        pools[partition.name] = queue_model.Pool(
            gpus=sum(
                sum(int(v) for k in n.accelerators.values() for v in k.values()) for n in members
            ),
            cpus=sum(n.cpus for n in members),
        )
    return pools


def _quotas(tenants: set[str]) -> dict:
    """{tenant id: its quotas}."""
    found: dict = {}
    for quota in Quota.objects.filter(tenant_id__in=tenants).select_related(
        "tenant", "project", "user"
    ):
        found.setdefault(str(quota.tenant_id), []).append(quota)
    return found


def _tenant_wide(quota: Quota) -> bool:
    return quota_scope(quota) == ("tenant",)


def _held_elsewhere(cluster_id, tenants: set[str]) -> dict:
    """GPUs the quota-limited tenants hold on other clusters (their quota is tenant-wide)."""
    if not tenants:
        return {}
    rows = (
        Job.objects.filter(tenant_id__in=tenants, state__in=list(ACTIVE))
        .exclude(cluster_id=cluster_id)
        .values("tenant_id")
        .annotate(gpus=Sum("gpus"))
    )
    return {str(row["tenant_id"]): row["gpus"] or 0 for row in rows}


def _too_big(job: Queued, pool: queue_model.Pool | None) -> str:
    if pool is None:
        return f"partition {job.partition!r} is not in the cluster's inventory"
    if job.gpus > pool.gpus or job.cpus > pool.cpus:
        return (
            f"partition {job.partition} has {pool.gpus} GPUs and {pool.cpus} CPUs on healthy"
            f" nodes; this job needs {job.gpus} and {job.cpus}"
        )
    return ""


def _cannot_start(job: Queued, pools: dict, quotas: list[Quota]) -> str:
    """Why waiting will never start the job, in words; '' when it can start in time."""
    too_big = _too_big(job, pools.get(job.partition))
    if too_big:
        return too_big
    for quota in quotas:
        if (quota.project_id and str(quota.project_id) != job.project_id) or (
            quota.user_id and quota.user_id != job.user_id
        ):
            continue  # another project's or user's
        for name, words in RESOURCES:
            limit, needs = getattr(quota, name), getattr(job, name)
            if limit is not None and needs > limit:
                return f"{quota.scope_label} allows {limit} {words}; this job needs {needs}"
        if quota.running_jobs == 0:
            return f"{quota.scope_label} allows no running jobs"
    if job.state == State.PENDING and "GPU-hours used this month" in job.state_reason:
        return f"{job.state_reason} (until the quota renews next month)"
    return ""
