"""Compute's Celery tasks."""

from celery import shared_task

from apps.compute.backends import for_cluster
from apps.compute.models import Cluster


@shared_task(name="compute.ping_clusters")
def ping_clusters() -> list[str]:
    """Each cluster's controller answers a ping; the failures, by cluster name. Run by a
    worker, which holds the clusters' credentials (the web process does not)."""
    failed = []
    for cluster in Cluster.objects.all():
        try:
            for_cluster(cluster).ping()
        except Exception as exc:  # any failure: report the cluster by name
            failed.append(f"{cluster.name}: {exc}")
    return failed
