"""Where a job can run: the cluster and partition whose nodes fit its request."""

from rest_framework.exceptions import ValidationError  # nested fields: environment.image

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


def candidate_clusters(*, named: str | None = None, project=None) -> list[Cluster]:
    """Where a job may run: the cluster its spec names; else its project's default, its
    tenant's, then the platform's (is_default); with no default anywhere, every cluster."""
    if named:
        return list(Cluster.objects.filter(name=named))
    if project is not None:
        chosen = project.default_cluster_id or project.tenant.default_cluster_id
        if chosen:
            return list(Cluster.objects.filter(pk=chosen))
    clusters = list(Cluster.objects.order_by("-is_default", "name"))
    defaults = [c for c in clusters if c.is_default]
    return defaults or clusters


def placements_fitting(
    *, resources: dict, needs_containers: bool = False, clusters: list[Cluster] | None = None
) -> list[tuple[Cluster, str]]:
    """Every cluster among `clusters` (default: candidate_clusters()) that can run the job,
    each with its first partition (the default first) whose nodes fit the per-node request,
    in the clusters' order.

    Raises a (400) ValidationError naming `resources` when nothing could ever run the job, and
    `environment.image` when it asks for a container where none runs.
    """
    if clusters is None:
        clusters = candidate_clusters()
    if not clusters:
        raise ValidationError({"resources": ["No cluster is configured on this platform."]})
    if needs_containers:
        runs = [c for c in clusters if c.supports_containers]
        if not runs:
            names = ", ".join(c.name for c in clusters)
            others = list(
                Cluster.objects.filter(supports_containers=True).values_list("name", flat=True)
            )
            hint = (
                f"; name one that does (cluster: {others[0]})"
                if others
                else "; use a venv or conda path"
            )
            raise ValidationError(
                {"environment": {"image": [f"Cluster {names} runs no containers{hint}."]}}
            )
        clusters = runs
    wanted = resources.get("partition")
    nodes_by_cluster: dict = {}
    for node in Node.objects.filter(cluster__in=clusters):
        nodes_by_cluster.setdefault(node.cluster_id, []).append(node)
    partitions = Partition.objects.filter(cluster__in=clusters).order_by("-is_default", "name")
    if wanted:
        partitions = partitions.filter(name=wanted)
        if not partitions.exists():
            raise ValidationError({"resources": {"partition": [f"No partition {wanted!r}."]}})
    fitting: dict = {}  # cluster id -> its first partition that fits
    for partition in partitions:
        if partition.cluster_id in fitting:
            continue
        nodes = [
            n
            for n in nodes_by_cluster.get(partition.cluster_id, [])
            if n.name in partition.node_names and _node_fits(n, resources)
        ]
        too_long = (
            partition.max_time_minutes and resources["time_limit"] > partition.max_time_minutes
        )
        if len(nodes) >= resources["nodes"] and not too_long:
            fitting[partition.cluster_id] = partition.name
    if fitting:
        return [(c, fitting[c.pk]) for c in clusters if c.pk in fitting]
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
