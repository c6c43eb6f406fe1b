"""Where a job can run: the cluster and partition whose nodes fit its request."""

from django.core.exceptions import ValidationError

from apps.compute.models import Cluster, Node, Partition


def _node_fits(node: Node, resources: dict) -> bool:
    r = resources
    needs_cpus = r["tasks_per_node"] * r["cpus_per_task"]
    accelerators = node.accelerator_count(r["accelerator"], r.get("gpu_type"))
    return (
        node.cpus >= needs_cpus
        and node.memory_mb >= r["memory"]
        and accelerators >= r["gpus_per_node"]
    )


def choose_placement(*, resources: dict, needs_containers: bool = False) -> tuple[Cluster, str]:
    """The first cluster/partition with enough nodes that each fit the per-node request.

    Raises ValidationError naming `resources` when nothing could ever run the job.
    """
    clusters = list(Cluster.objects.order_by("-is_default", "name"))
    if not clusters:
        raise ValidationError({"resources": ["No cluster is configured on this platform."]})
    if needs_containers:
        clusters = [c for c in clusters if c.supports_containers]
        if not clusters:
            raise ValidationError(
                {"environment": ["No cluster here runs containers; use a venv or conda path."]}
            )
    wanted = resources.get("partition")
    nodes_by_cluster: dict = {}
    for node in Node.objects.filter(cluster__in=clusters):
        nodes_by_cluster.setdefault(node.cluster_id, []).append(node)
    partitions = Partition.objects.filter(cluster__in=clusters).order_by("-is_default", "name")
    if wanted:
        partitions = partitions.filter(name=wanted)
        if not partitions.exists():
            raise ValidationError({"resources": {"partition": [f"No partition {wanted!r}."]}})
    for partition in partitions:
        nodes = [
            n
            for n in nodes_by_cluster.get(partition.cluster_id, [])
            if n.name in partition.node_names and _node_fits(n, resources)
        ]
        too_long = (
            partition.max_time_minutes and resources["time_limit"] > partition.max_time_minutes
        )
        if len(nodes) >= resources["nodes"] and not too_long:
            return partition.cluster, partition.name
    r = resources
    kind = f"{r['accelerator']}:{r['gpu_type']}" if r.get("gpu_type") else r["accelerator"]
    raise ValidationError(
        {
            "resources": [
                f"No partition has {r['nodes']} node(s) with {r['gpus_per_node']} {kind}, "
                f"{r['tasks_per_node'] * r['cpus_per_task']} CPUs and {r['memory']} MiB each"
                f" within {r['time_limit']} minutes."
            ]
        }
    )
