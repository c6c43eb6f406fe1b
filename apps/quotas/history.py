"""Utilisation over time from the usage ledger: GPU-hours per bucket (hour, day or week, in
UTC) and the GPUs allocated on average in it, per tenant, project or user.

An attempt's record spans [started_at, ended_at]; its GPU-seconds are spread over the buckets
it overlaps in proportion to the overlap (one that ends where it starts counts in the bucket
of its end). One SQL statement: the buckets from generate_series joined with the records the
actor may see (the same `visible_to` as every usage read), summed per bucket and group. The
attempts running now have no record yet: each counts its GPUs from its start until now (a
second statement), so the chart shows what is allocated while it runs.
"""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import F, QuerySet
from django.utils import timezone

from apps.core.actor import Actor
from apps.quotas.models import UsageRecord

BUCKETS = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}
GROUPS = {
    "tenant": ("tenant",),
    "project": ("tenant", "project"),
    "user": ("tenant", "user"),
}
MAX_BUCKETS = 1000
# The job attempts an actor may see (jobs' JobAttempt.objects.visible_to), registered by jobs
# from its AppConfig.ready(): quotas never import jobs.
_ATTEMPTS_VISIBLE: list[Callable[[Actor], QuerySet]] = []


def attempts_visible_register(source: Callable[[Actor], QuerySet]) -> None:
    """Register where the attempts running now (not yet in the ledger) are read from."""
    _ATTEMPTS_VISIBLE[:] = [source]


def bucket_start(moment: datetime, *, bucket: str) -> datetime:
    """The start of the UTC bucket holding `moment` (weeks start on Monday)."""
    moment = moment.astimezone(UTC)
    if bucket == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday()) if bucket == "week" else day


def bucket_starts(*, since: datetime, until: datetime, bucket: str) -> list[datetime]:
    """Every bucket from the one holding `since` to the one holding the instant before `until`."""
    step, start = BUCKETS[bucket], bucket_start(since, bucket=bucket)
    return [start + i * step for i in range(max(0, -(-(until - start) // step)))]


def utilisation_history(
    *,
    actor: Actor,
    since: datetime,
    until: datetime,
    bucket: str,
    group_by: str,
    tenant_id=None,
    project_id=None,
) -> list[dict]:
    """[{tenant, project?|user?, points: [{start, gpu_hours, gpus}, ...]}, ...], a point for
    every bucket (zeros included), groups in name order."""
    starts = bucket_starts(since=since, until=until, bucket=bucket)
    if not starts:
        return []
    step = BUCKETS[bucket]
    first, end = starts[0], starts[-1] + step
    records = UsageRecord.objects.visible_to(actor).filter(started_at__lt=end, ended_at__gte=first)
    if tenant_id is not None:
        records = records.filter(tenant_id=tenant_id)
    if project_id is not None:
        records = records.filter(project_id=project_id)
    keys = GROUPS[group_by]
    names = {"tenant": "tenant__slug", "project": "project__slug", "user": "user__username"}
    records = records.annotate(**{f"g_{k}": F(names[k]) for k in keys}).values(
        "started_at", "ended_at", "gpu_seconds", *(f"g_{k}" for k in keys)
    )
    inner, params = records.query.sql_with_params()
    columns = ", ".join(f"r.g_{k}" for k in keys)
    sql = f"""
        WITH r AS ({inner}),
             b AS (SELECT generate_series(%s::timestamptz, %s::timestamptz, %s::interval) AS start)
        SELECT b.start, {columns}, SUM(
            CASE WHEN r.ended_at <= r.started_at THEN
                CASE WHEN r.ended_at < b.start + %s::interval THEN r.gpu_seconds ELSE 0 END
            ELSE r.gpu_seconds * EXTRACT(EPOCH FROM
                LEAST(r.ended_at, b.start + %s::interval) - GREATEST(r.started_at, b.start))
                / EXTRACT(EPOCH FROM r.ended_at - r.started_at)
            END)
        FROM b JOIN r ON r.started_at < b.start + %s::interval AND r.ended_at >= b.start
        GROUP BY b.start, {columns}
    """  # noqa: S608 (the inner query is Django's, with its parameters; the rest are ours)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, first, starts[-1], step, step, step, step])
        rows = cursor.fetchall()
    index = {start: i for i, start in enumerate(starts)}
    seconds: dict[tuple, list[float]] = {}
    for start, *group, value in rows:
        series = seconds.setdefault(tuple(group), [0.0] * len(starts))
        series[index[start.astimezone(UTC)]] += max(float(value or 0), 0.0)
    running = _running(actor=actor, end=end, keys=keys, names=names)
    if tenant_id is not None:
        running = running.filter(job__tenant_id=tenant_id)
    if project_id is not None:
        running = running.filter(job__project_id=project_id)
    now = timezone.now()
    for row in running:
        series = seconds.setdefault(tuple(row[f"g_{k}"] for k in keys), [0.0] * len(starts))
        for i, start in enumerate(starts):
            overlap = min(now, start + step) - max(row["started_at"], start)
            series[i] += max(overlap.total_seconds(), 0.0) * row["job__gpus"]
    length = step.total_seconds()
    return [
        {
            **dict(zip(keys, group, strict=True)),
            "points": [
                {"start": start, "gpu_hours": round(s / 3600, 4), "gpus": round(s / length, 4)}
                for start, s in zip(starts, values, strict=True)
            ],
        }
        for group, values in sorted(seconds.items())
    ]


def _running(*, actor: Actor, end: datetime, keys, names: dict):
    """The attempts the actor may see running, started before `end`, without a ledger line."""
    (visible,) = _ATTEMPTS_VISIBLE  # registered by jobs (apps/jobs/apps.py)
    attempts = visible(actor)
    names = {k: f"job__{v}" for k, v in names.items()}
    return (
        attempts.filter(state="RUNNING", started_at__lt=end, usage__isnull=True)
        .exclude(started_at=None)
        .annotate(**{f"g_{k}": F(names[k]) for k in keys})
        .values("started_at", "job__gpus", *(f"g_{k}" for k in keys))
    )
