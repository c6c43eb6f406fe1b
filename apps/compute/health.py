"""/readyz check for the clusters: each controller answers a ping."""

from apps.compute.backends import for_cluster
from apps.compute.models import Cluster
from apps.core.health import check


@check("clusters")
def _clusters() -> None:
    failed = []
    for cluster in Cluster.objects.all():
        try:
            for_cluster(cluster).ping()
        except Exception as exc:  # any failure: report the cluster by name
            failed.append(f"{cluster.name}: {exc}")
    if failed:
        raise RuntimeError("; ".join(failed))
