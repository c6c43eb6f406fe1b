"""/readyz check for the clusters: each controller answers a ping, asked through a worker
(the clusters' credentials, such as the Slurm JWT key, stay out of the web process)."""

from django.conf import settings

from apps.compute.tasks import ping_clusters
from apps.core.health import check


@check("clusters")
def _clusters() -> None:
    wait = settings.TORUS_READYZ_CELERY_TIMEOUT + 5
    failed = ping_clusters.apply_async(expires=wait).get(timeout=wait)
    if failed:
        raise RuntimeError("; ".join(failed))
