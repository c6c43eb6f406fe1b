"""Reads of a job's output: a chunk of an attempt's log file, its training metrics (the time
series it reported, their latest values) and the failure signatures it matched."""

from collections import defaultdict

from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import ValidationError
from django.db.models import OuterRef

from apps.compute.backends.base import ClusterUnavailable
from apps.jobs.models import ATTEMPT_ENDED, Job
from apps.logs.models import JobMetric, SignatureMatch
from apps.logs.sources import log_ref, source_for
from apps.secrets.mask import masker_for, read_masked


def read_log_chunk(*, job: Job, stream: str, offset: int, limit: int, attempt: int | None = None):
    """Bytes [offset, offset+limit) of an attempt's stdout or stderr, decoded leniently, read
    through its cluster's log source. The path comes from the attempt row, never the request."""
    attempts = job.attempts.order_by("-number")
    row = attempts.filter(number=attempt).first() if attempt else attempts.first()
    if attempt and row is None:
        raise ValidationError({"attempt": [f"This job has no attempt {attempt}."]})
    empty = {
        "attempt": row.number if row else None,
        "stream": stream,
        "offset": offset,
        "next_offset": offset,
        "data": "",
        "complete": row is None,
    }
    if row is None:
        return empty
    ref = log_ref(attempt=row, stream=stream)
    source = source_for(attempt=row)
    masker = masker_for(row)  # the job's secrets, overwritten with '*' (offsets stay true)
    try:
        size = source.size(ref=ref)
        data = (
            read_masked(
                lambda at, n: source.read(ref=ref, offset=at, limit=n),
                offset=min(offset, size),
                limit=limit,
                masker=masker,
            )
            if size
            else b""
        )
    except ClusterUnavailable:
        size = None
    if size is None or data is None:
        return {**empty, "complete": row.state in ATTEMPT_ENDED}
    # Never cut a UTF-8 character in two: stop before an incomplete trailing sequence.
    cut = len(data)
    if cut == limit:
        while cut > 0 and (data[cut - 1] & 0xC0) == 0x80:
            cut -= 1
        if cut > 0 and data[cut - 1] >= 0xC0:
            cut -= 1
        cut = cut or len(data)
    data = data[:cut]
    next_offset = min(offset, size) + len(data)
    return {
        "attempt": row.number,
        "stream": stream,
        "offset": offset,
        "next_offset": next_offset,
        "data": data.decode("utf-8", errors="replace"),
        "complete": row.state in ATTEMPT_ENDED and next_offset >= size,
    }


def job_metric_series(
    *, job, names: list[str] | None = None, since_step: int | None = None, limit: int = 10_000
) -> dict[str, list[dict]]:
    """{name: [{step, value, timestamp, attempt}, ...]} in step order; the latest attempt's
    value wins where a restarted run reported the same step again."""
    rows = JobMetric.objects.filter(job=job)
    if names:
        rows = rows.filter(name__in=names)
    if since_step is not None:
        rows = rows.filter(step__gt=since_step)
    rows = rows.order_by("name", "step", "attempt__number").values(
        "name", "step", "value", "timestamp", "attempt__number"
    )[:limit]
    series: dict[str, dict[int, dict]] = defaultdict(dict)
    for row in rows:
        series[row["name"]][row["step"]] = {
            "step": row["step"],
            "value": row["value"],
            "timestamp": row["timestamp"],
            "attempt": row["attempt__number"],
        }
    return {name: list(points.values()) for name, points in series.items()}


def job_latest_metrics(*, job: Job) -> dict[str, float]:
    """{name: value} of each metric's latest step (the latest report of it on a tie)."""
    return {
        m.name: m.value
        for m in JobMetric.objects.filter(job=job)
        .order_by("name", "-step", "-timestamp")
        .distinct("name")
    }


def job_signature_names() -> ArraySubquery:
    """The failure signatures a job (OuterRef("pk")) matched, by name: one subquery."""
    names = (
        SignatureMatch.objects.filter(job_id=OuterRef("pk"))
        .values_list("signature__name", flat=True)
        .distinct()
        .order_by("signature__name")
    )
    return ArraySubquery(names)
