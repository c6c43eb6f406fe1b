"""Reads of training metrics (the time series a job reported)."""

from collections import defaultdict

from apps.logs.models import JobMetric


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
