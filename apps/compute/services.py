"""Writes for compute: keeping partitions and nodes in step with the cluster."""

from django.db import transaction
from django.utils import timezone

from apps.compute.backends import for_cluster
from apps.compute.backends.base import ClusterUnavailable, NodeInfo, PartitionInfo
from apps.compute.models import Cluster, Node, Partition


def inventory_store(
    *, cluster: Cluster, partitions: list[PartitionInfo], nodes: list[NodeInfo]
) -> None:
    with transaction.atomic():
        for info in partitions:
            Partition.objects.update_or_create(
                cluster=cluster,
                name=info.name,
                defaults={
                    "is_default": info.is_default,
                    "state": info.state,
                    "max_time_minutes": info.max_time_minutes,
                    "node_names": info.node_names,
                },
            )
        Partition.objects.filter(cluster=cluster).exclude(
            name__in=[p.name for p in partitions]
        ).delete()
        for info in nodes:
            Node.objects.update_or_create(
                cluster=cluster,
                name=info.name,
                defaults={
                    "address": info.address,
                    "partitions": info.partitions,
                    "cpus": info.cpus,
                    "memory_mb": info.memory_mb,
                    "accelerators": info.accelerators,
                    "accelerators_in_use": info.accelerators_in_use,
                    "state": info.state,
                    "reason": info.reason,
                },
            )
        Node.objects.filter(cluster=cluster).exclude(name__in=[n.name for n in nodes]).delete()
        Cluster.objects.filter(pk=cluster.pk).update(
            last_synced_at=timezone.now(), healthy=True, last_error=""
        )


def cluster_sync(*, cluster: Cluster) -> bool:
    """Read partitions and nodes from the cluster; False (and the error kept) if unreachable."""
    try:
        partitions, nodes = for_cluster(cluster).inventory()
    except ClusterUnavailable as exc:
        Cluster.objects.filter(pk=cluster.pk).update(healthy=False, last_error=str(exc)[:2000])
        return False
    inventory_store(cluster=cluster, partitions=partitions, nodes=nodes)
    return True
