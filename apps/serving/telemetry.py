"""The deployments' series for /metrics (apps/core/telemetry.py): requests through the
gateway by status class, tokens in and out, and latency, per tenant and deployment; read from
the request records (apps/serving/records.py) at scrape time."""

from django.db.models import Count, F, Sum
from prometheus_client.core import CounterMetricFamily

from apps.core import telemetry
from apps.serving.models import ServingRequest

PLACE = {"tenant": "deployment__tenant__slug", "deployment": "deployment__name"}


@telemetry.collector("serving")
def collect():
    requests = CounterMetricFamily(
        "torus_serving_requests",
        "Requests through the gateway, by status class (2xx, 4xx, 5xx)",
        labels=[*PLACE, "status"],
    )
    tokens = CounterMetricFamily(
        "torus_serving_tokens", "Tokens in (prompt) and out", labels=[*PLACE, "direction"]
    )
    rows = (
        ServingRequest.objects.annotate(
            t=F(PLACE["tenant"]), d=F(PLACE["deployment"]), s=F("status") / 100
        )
        .values("t", "d", "s")
        .annotate(n=Count("pk"), tin=Sum("tokens_in"), tout=Sum("tokens_out"))
        .order_by()
    )
    spent: dict = {}
    for row in rows:
        requests.add_metric([row["t"], row["d"], f"{row['s']}xx"], row["n"])
        tin, tout = spent.get((row["t"], row["d"]), (0, 0))
        spent[row["t"], row["d"]] = (tin + (row["tin"] or 0), tout + (row["tout"] or 0))
    for (tenant, deployment), (tin, tout) in sorted(spent.items()):
        tokens.add_metric([tenant, deployment, "in"], tin)
        tokens.add_metric([tenant, deployment, "out"], tout)
    yield requests
    yield tokens
    yield telemetry.histogram_from_rows(
        "torus_serving_latency_seconds",
        "Time from a request's arrival at the gateway to its last byte",
        queryset=ServingRequest.objects.all(),
        seconds=F("latency_ms") / 1000.0,
        labels=PLACE,
    )
