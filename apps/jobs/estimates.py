"""When each waiting job is expected to start: a point from the queue played forward, and a
range calibrated on how far past predictions missed.

Each control pass, per cluster (estimates_refresh):
1. the running jobs' ends are predicted from similar past runs (apps/jobs/runtimes.py), not
   their time limits;
2. the waiting jobs (PENDING, QUEUED, SUBMITTED, RESTARTING) are put in the order admission
   and the cluster's queue take them (apps/jobs/priority.order_key) and played forward on the
   partitions' healthy capacity under the tenants' GPU quotas (apps/jobs/queue_model.py);
3. each point becomes a range by split conformal calibration on the log of the wait, per bin
   of predicted wait (BINS): every job's first prediction is kept, and when the job starts,
   log((actual wait + S) / (predicted wait + S)) joins its bin's last RESIDUALS_KEPT
   residuals; p10/p50/p90 are the predicted wait scaled by those residuals' 10th, 50th and
   90th percentiles (every bin's while a bin has fewer than CALIBRATION_MIN; 0.5x to 2x,
   said to be uncalibrated, while all have fewer).
A job that cannot start (over a hard quota, bigger than its partition's healthy nodes) gets the
reason instead of a time. The results live in Redis, one hash per cluster replaced whole each
pass: the API reads the page's jobs with one HMGET per cluster (estimates_read).
"""

import contextlib
import gc
import json
from datetime import UTC, datetime
from typing import NamedTuple

from django.db import connection
from django.db.models import CharField, FloatField, Sum
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Extract
from django.utils import timezone

from apps.compute.backends.slurm_words import node_healthy
from apps.compute.models import Cluster, Node, Partition
from apps.core.generations import redis_client
from apps.jobs import borrowing, extras, queue_model, runtimes
from apps.jobs.admission import RESOURCES, quota_scope
from apps.jobs.estimate_learning import calibration, forget_gone, learn, waiting_too_long
from apps.jobs.estimate_store import META, WAITING, range_of, store_key
from apps.jobs.models import AttemptState, Job, JobAttempt
from apps.jobs.priority import in_order
from apps.jobs.states import ACTIVE, State
from apps.quotas.models import Quota


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
    cluster = Cluster.objects.filter(pk=cluster_id).only("name", "healthy", "config").first()
    name, healthy = (cluster.name, cluster.healthy) if cluster else ("", False)
    last = client.hget(store_key("now", cluster_id), META)
    since = json.loads(last)["computed_at"] if last else None
    started = JobAttempt.objects.filter(job__cluster_id=cluster_id, started_at__isnull=False)
    if since is not None:  # the attempts started since the last pass (all, the first pass)
        started = started.filter(started_at__gte=datetime.fromtimestamp(since - 5, UTC))
    started = dict(started.values_list(_text("job_id"), _epoch("started_at")))
    learned = learn(client, cluster_id=cluster_id, cluster_name=name, started=started)
    ids = {j.id for j in waiting}
    forget_gone(client, cluster_id=cluster_id, waiting=ids)
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
    waiting_model, run_seconds, share = queue_model.Waiting, runtimes.run_seconds, runtimes.share
    for index, job in enumerate(order):
        shape = (job.user_id, job.project_id, job.name, job.spec["resources"]["time_limit"])
        known_shape = predicted.get(shape)
        if known_shape is None:
            runs = known.runs_for(job)
            basis = bases.setdefault(runs.basis, len(bases))
            known_shape = predicted[shape] = runs.seconds, runtimes.limit_seconds(job), basis
        basis_of.append(known_shape[2])
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
            seconds = run_seconds(*known_shape[:2], at=share(job.id))
            model_jobs.append(
                waiting_model(index, job.partition, job.tenant, job.gpus, job.cpus, seconds)
            )
    starts = queue_model.simulate(
        now=clock,
        pools=pools,
        running=running,
        waiting=model_jobs,
        tenant_limits=limits,
        tenant_held_elsewhere=_held_elsewhere(cluster_id, set(limits)),
        lending=borrowing.enabled(cluster),
    )
    factors, calibrated = calibration(client, cluster_id)
    meta = {"computed_at": clock, "factors": factors, "bases": list(bases), "range": calibrated}
    meta["healthy"] = healthy  # (soonest reads it here: its cluster rows come from a cache)
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
            p10, _, p90 = range_of(clock, wait, factors)
            firsts[job.id] = f"{clock:.1f} {wait:.1f} {p10:.0f} {p90:.0f}"
    _store(client, cluster_id=cluster_id, estimates=estimates, firsts=firsts)
    if overdue:  # told after the pass's writes (a notifier that fails loses no estimate)
        extras.notice(kind="waiting_too_long", reasons=dict.fromkeys(overdue, ""))
    estimated = sum(1 for value in estimates.values() if not value.startswith(("!", "{")))
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


def _store(client, *, cluster_id, estimates: dict, firsts: dict) -> None:
    """Replace the cluster's estimates whole (a temporary key renamed: readers never see half
    of a pass); add the first predictions of the jobs new to the queue."""
    now_key, first_key = store_key("now", cluster_id), store_key("first", cluster_id)
    with client.pipeline(transaction=False) as pipe:
        temporary = f"{now_key}:next"  # (always the meta field: read by soonest)
        pipe.delete(temporary)
        pipe.hset(temporary, mapping=estimates)
        pipe.rename(temporary, now_key)
        for job_id, first in firsts.items():  # (never over the first one)
            pipe.hsetnx(first_key, job_id, first)
        if firsts:  # when each is overdue: its first p90 (waiting_too_long)
            due = {job_id: float(first.split()[3]) for job_id, first in firsts.items()}
            pipe.zadd(store_key("due", cluster_id), due, nx=True)
        pipe.execute()


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
