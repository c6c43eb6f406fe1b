"""Reads for jobs beyond plain querysets: the dataset cache's figures per node."""

from django.db.models import Count, F, Sum

from apps.jobs.models import DatasetStage


def node_cache_summary(*, actor, node: str | None = None) -> list[dict]:
    """Dataset cache figures per node (apps/jobs/staging.py) over the attempts of the jobs
    the actor can see: files found in the cache, files staged, bytes staged and evicted."""
    stages = DatasetStage.objects.visible_to(actor)
    if node:
        stages = stages.filter(node=node)
    return list(
        stages.values("node", cluster=F("attempt__job__cluster__name"))
        .annotate(
            attempts=Count("attempt", distinct=True),
            hits=Sum("hits"),
            misses=Sum("misses"),
            bytes_staged=Sum("bytes_staged"),
            bytes_hit=Sum("bytes_hit"),
            evicted_bytes=Sum("evicted_bytes"),
        )
        .order_by("cluster", "node")
    )
