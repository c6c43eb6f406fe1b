"""The operators' metrics, in Prometheus's format: counters and histograms the platform's
processes record in Redis (web, workers, beat and shippers add to the same series), and the
collectors each app registers for what it reads from its own tables at scrape time. Served at
/metrics by apps/core/scrape.py. Labels are bounded (tenants, clusters, partitions, passes,
causes, signatures): never a job's, a request's or a person's id."""

import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import Case, Count, F, FloatField, Sum, Value, When
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from redis.exceptions import RedisError

from apps.core.generations import counter_key, redis_client

logger = logging.getLogger(__name__)

# Seconds, from a fast pass to a day's wait: one set for every timing the platform records.
BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 15, 30, 60, 120, 300, 900, 1800, 3600, 7200,
           21600, 86400)  # fmt: skip


@dataclass(frozen=True)
class Series:
    """One recorded series: a counter (`add`) or a histogram of seconds (`observe`)."""

    name: str
    help: str
    labels: tuple[str, ...]
    histogram: bool = False

    @property
    def key(self) -> str:
        return counter_key(f"telemetry:{self.name}")


SERIES: dict[str, Series] = {}
# name -> callable yielding metric families read at scrape time (apps register in ready())
COLLECTORS: dict[str, Callable[[], Iterable[Metric]]] = {}


def counter(name: str, help: str, *, labels: tuple[str, ...] = ()) -> Series:
    return SERIES.setdefault(name, Series(name, help, labels))


def histogram(name: str, help: str, *, labels: tuple[str, ...] = ()) -> Series:
    return SERIES.setdefault(name, Series(name, help, labels, histogram=True))


def collector(name: str):
    def register(func: Callable[[], Iterable[Metric]]):
        COLLECTORS[name] = func
        return func

    return register


def _field(series: Series, labels: dict) -> str:
    if set(labels) != set(series.labels):
        raise ValueError(f"{series.name} takes the labels {series.labels}, not {tuple(labels)}")
    return json.dumps([str(labels[name]) for name in series.labels])


def add(series: Series, amount: float = 1, **labels) -> None:
    """Count `amount` on a counter. Redis away: the count is lost and logged, never raised
    (a metric never stops the pass that records it)."""
    field = _field(series, labels)
    client = redis_client()
    if client is None:
        return
    try:
        client.hincrbyfloat(series.key, field, amount)
    except RedisError as exc:
        logger.warning("metric %s not recorded: %s", series.name, exc)


def observe(series: Series, seconds: float, **labels) -> None:
    """Record one duration in a histogram (its bucket, sum and count, in one round trip)."""
    field = _field(series, labels)
    bucket = next((b for b in BUCKETS if seconds <= b), math.inf)
    client = redis_client()
    if client is None:
        return
    try:
        pipe = client.pipeline(transaction=False)
        pipe.hincrby(series.key, f"{field}\t{bucket}", 1)
        pipe.hincrbyfloat(series.key, f"{field}\tsum", seconds)
        pipe.execute()
    except RedisError as exc:
        logger.warning("metric %s not recorded: %s", series.name, exc)


def stamp(name: str) -> None:
    """Note that `name` happened now (the shipper caught up, say): a gauge's source."""
    client = redis_client()
    if client is None:
        return
    try:
        client.hset(counter_key("telemetry:stamps"), name, time.time())
    except RedisError as exc:
        logger.warning("stamp %s not recorded: %s", name, exc)


def stamps() -> dict[str, float]:
    client = redis_client()
    raw = client.hgetall(counter_key("telemetry:stamps")) if client is not None else {}
    return {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in raw.items()}


def histogram_family(name: str, help: str, labels: tuple[str, ...], counts: dict) -> Metric:
    """A histogram family from {label values: ({bucket bound: count in it}, sum)}, the counts
    per bucket (not cumulative); bounds are BUCKETS' and math.inf."""
    family = HistogramMetricFamily(name, help, labels=list(labels))
    for values, (per_bucket, total) in sorted(counts.items()):
        running, buckets = 0, []
        for bound in (*BUCKETS, math.inf):
            running += per_bucket.get(bound, 0)
            buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), running))
        family.add_metric(list(values), buckets, total)
    return family


def histogram_from_rows(
    name: str, help: str, *, queryset, seconds, labels: dict[str, str]
) -> Metric:
    """A histogram over rows, counted in the database: `seconds` (an expression over a row)
    bucketed by BUCKETS, grouped by `labels` ({label: field}); one query."""
    bound = Case(
        *(When(torus_seconds__lte=b, then=Value(float(b))) for b in BUCKETS),
        default=Value(None),
        output_field=FloatField(),
    )
    fields = {f"torus_label_{i}": F(field) for i, field in enumerate(labels.values())}
    rows = (
        queryset.annotate(torus_seconds=seconds, torus_bound=bound, **fields)
        .values(*fields, "torus_bound")
        .annotate(torus_n=Count("pk"), torus_sum=Sum("torus_seconds"))
        .order_by()
    )
    counts: dict = defaultdict(lambda: ({}, 0.0))
    for row in rows:
        values = tuple("" if row[f] is None else str(row[f]) for f in fields)
        per_bucket, total = counts[values]
        bound_of = math.inf if row["torus_bound"] is None else row["torus_bound"]
        per_bucket[bound_of] = per_bucket.get(bound_of, 0) + row["torus_n"]
        counts[values] = (per_bucket, total + (row["torus_sum"] or 0.0))
    return histogram_family(name, help, tuple(labels), counts)


def counts_from_rows(
    family: CounterMetricFamily | GaugeMetricFamily, *, queryset, labels: dict[str, str]
) -> Metric:
    """A counter or gauge of rows grouped by `labels` ({label: field}); one query."""
    fields = {f"torus_label_{i}": F(field) for i, field in enumerate(labels.values())}
    rows = queryset.annotate(**fields).values(*fields).annotate(torus_n=Count("pk")).order_by()
    for row in rows:
        family.add_metric(["" if row[f] is None else str(row[f]) for f in fields], row["torus_n"])
    return family


def _recorded(series: Series) -> Metric:
    client = redis_client()
    raw = client.hgetall(series.key) if client is not None else {}
    if not series.histogram:
        family = CounterMetricFamily(series.name, series.help, labels=list(series.labels))
        for field, value in sorted(raw.items()):
            family.add_metric(json.loads(field), float(value))
        return family
    counts: dict = defaultdict(lambda: ({}, 0.0))
    for field, value in raw.items():
        labels, part = (field.decode() if isinstance(field, bytes) else field).split("\t")
        values = tuple(json.loads(labels))
        per_bucket = counts[values][0]
        if part == "sum":
            counts[values] = (per_bucket, float(value))
        else:
            per_bucket[float(part)] = int(value)
    return histogram_family(series.name, series.help, series.labels, counts)


class _Platform:
    def collect(self):
        failed = GaugeMetricFamily(
            "torus_metrics_collector_failed",
            "1 where a collector raised at this scrape (logged); its series are missing",
            labels=["collector"],
        )
        sources = [(f"recorded:{s.name}", lambda s=s: [_recorded(s)]) for s in SERIES.values()]
        for name, collect in [*sources, *COLLECTORS.items()]:
            try:
                yield from list(collect())
            except Exception:
                logger.exception("metrics collector %s failed", name)
                failed.add_metric([name], 1)
        yield failed


def render() -> bytes:
    """Every series, in Prometheus's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Platform())
    return generate_latest(registry)
