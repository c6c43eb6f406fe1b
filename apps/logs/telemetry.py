"""The logs' series for /metrics (apps/core/telemetry.py): what the shippers shipped, how far
behind each shard is, Elasticsearch's bulk errors, and the failure signatures matched."""

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from apps.core import telemetry
from apps.logs.models import SignatureMatch

SHIPPED = telemetry.counter(
    "torus_shipper_documents", "Log lines and metric points the shippers had acknowledged"
)
ES_ERRORS = telemetry.counter(
    "torus_elasticsearch_bulk_errors",
    "Shipper passes that Elasticsearch failed (unreachable, refused, a bulk item rejected):"
    " retried from the stored offsets",
    labels=("error",),
)


def shipped(*, documents: int) -> None:
    telemetry.add(SHIPPED, documents)


def elasticsearch_failed(*, error: BaseException) -> None:
    telemetry.add(ES_ERRORS, error=type(error).__name__)


def caught_up(*, shards) -> None:
    """A shipper read every stream of these shards to its end in this pass."""
    for shard in shards:
        telemetry.stamp(f"shipper:{shard}")


@telemetry.collector("logs")
def collect():
    behind = GaugeMetricFamily(
        "torus_shipper_behind_seconds",
        "Since a shipper last read every stream of the shard to its end (about its pass"
        " interval while it keeps up)",
        labels=["shard"],
    )
    now = time.time()
    for name, at in sorted(telemetry.stamps().items()):
        if name.startswith("shipper:"):
            behind.add_metric([name.split(":", 1)[1]], max(0.0, now - at))
    yield behind
    yield telemetry.counts_from_rows(
        CounterMetricFamily(
            "torus_failure_signature_matches",
            "Failed attempts that matched a failure signature, by signature",
            labels=["signature"],
        ),
        queryset=SignatureMatch.objects.all(),
        labels={"signature": "signature__name"},
    )
