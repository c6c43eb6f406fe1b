"""/readyz check for Elasticsearch (cluster health, since this build has no GET /)."""

from apps.core.health import check
from apps.logs.es import client


@check("elasticsearch")
def _elasticsearch() -> None:
    health = client().options(request_timeout=3).cluster.health()
    if health["status"] == "red":
        raise RuntimeError("cluster health is red")
