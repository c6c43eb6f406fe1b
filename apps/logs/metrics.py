"""A job's metric points: training metrics reported as output lines (`torus-metric
step=<int> <name>=<float> ...`; the SDK's torus.log_metrics() prints exactly this line, any
program may print it too), and their store (the shipper's, and the usage samples')."""

import json
import math
import re
from typing import NamedTuple

from django.db import connection

METRIC_PREFIX = "torus-metric "
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")


def parse_metric_line(text: str) -> tuple[int, dict[str, float]] | None:
    """(step, {name: value}) from a metric line, or None if the line is not a valid one."""
    if not text.startswith(METRIC_PREFIX):
        return None
    pairs = {}
    for item in text[len(METRIC_PREFIX) :].split():
        key, sep, raw = item.partition("=")
        if not sep or not NAME.match(key):
            return None
        pairs[key] = raw
    try:
        step = int(pairs.pop("step"))
        values = {key: float(raw) for key, raw in pairs.items()}
    except (KeyError, ValueError):
        return None
    values = {key: value for key, value in values.items() if math.isfinite(value)}
    return (step, values) if values else None


class Point(NamedTuple):
    """One metric value (of an output line, or of a usage sample): a JobMetric row to be."""

    job_id: str
    attempt_id: str
    stream: str
    offset: int
    step: int
    name: str
    value: float
    timestamp: str


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# JobMetric.objects.bulk_create(ignore_conflicts=True), with the rows as one JSON parameter
# instead of a model instance and an escaped literal per value (that cost a third of the
# shipper's CPU); the unique (attempt, stream, offset, name) keeps each point once.
_INSERT_METRICS = """
INSERT INTO logs_jobmetric
    (id, created_at, updated_at, job_id, attempt_id, stream, "offset", step, name, value,
     "timestamp")
SELECT gen_random_uuid(), now(), now(), job_id, attempt_id, stream, "offset", step, name, value,
    "timestamp"
FROM jsonb_to_recordset(%s::jsonb) AS r(job_id uuid, attempt_id uuid, stream text,
    "offset" bigint, step bigint, name text, value double precision, "timestamp" timestamptz)
ON CONFLICT DO NOTHING
"""


def points_store(points: list[Point]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_METRICS, [_encode([point._asdict() for point in points])])
