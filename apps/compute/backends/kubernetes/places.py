"""A tenant's (or project's) place on a Kubernetes cluster as plain dicts (pure functions, no
client calls): its namespace, network and egress policies, GPU quota, Kueue flavor and queues,
and the volumes of its projects' trees."""

import ipaddress

from apps.compute.backends.kubernetes import names
from apps.compute.backends.kubernetes.manifests import (
    A_GPU_LIMIT,
    KUEUE,
    L_PROJECT,
    L_TENANT,
    LOCAL_QUEUE,
    MANAGED,
    cluster_queue_name,
    flavor_name,
    pool_toleration,
    project_root,
    volume_names,
)
from apps.compute.backends.kubernetes.settings import KubeSettings


def namespace(*, name: str, tenant: str, project: str | None) -> dict:
    labels = {**MANAGED, L_TENANT: names.dns_label(tenant, field="tenant")}
    if project:
        labels[L_PROJECT] = names.dns_label(project, field="project")
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def network_policy(*, namespace: str) -> dict:
    """Default deny for ingress, except from pods of the same namespace (the ranks of a
    job reach each other; other tenants' pods reach nothing)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "torus-default-deny", "namespace": namespace, "labels": MANAGED},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
        },
    }


# The cloud's instance metadata (AWS, GCP, Azure, OpenStack; AWS's IPv6 one): credentials of
# the node's own role live there.
METADATA_CIDRS = ("169.254.169.254/32", "fd00:ec2::254/128")
EGRESS_POLICY = "torus-egress"


def egress_policy(*, settings: KubeSettings, namespace: str, apiserver: list[str]) -> dict:
    """What a tenant's pods may reach: DNS (UDP and TCP 53) on the cluster's DNS pods, the
    pods of their own namespace, and the allowed networks (the internet by default: jobs
    fetch packages and models) except the platform's networks, the apiserver (`apiserver`:
    its Service address and endpoints) and the cloud metadata address. NetworkPolicy has no
    deny rule: the denied networks are the `except` of each allowed block; an allowed
    network inside a denied one is dropped."""
    denied = [
        ipaddress.ip_network(c) for c in (*METADATA_CIDRS, *settings.egress_deny_cidrs, *apiserver)
    ]
    blocks = []
    for allowed in map(ipaddress.ip_network, settings.egress_allow_cidrs):
        same = [d for d in denied if d.version == allowed.version]
        if any(allowed.subnet_of(d) for d in same):
            continue
        inside = sorted({d for d in same if d.subnet_of(allowed)})
        block = {"cidr": str(allowed)}
        if inside:
            block["except"] = [str(d) for d in inside]
        blocks.append({"ipBlock": block})
    dns = {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": settings.dns_namespace}
        },
        "podSelector": {"matchLabels": dict(settings.dns_pod_labels)},
    }
    egress = [
        {"to": [dns], "ports": [{"protocol": p, "port": 53} for p in ("UDP", "TCP")]},
        {"to": [{"podSelector": {}}]},
    ]
    if blocks:
        egress.append({"to": blocks})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": EGRESS_POLICY, "namespace": namespace, "labels": MANAGED},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress},
    }


def resource_quota(*, namespace: str, resource: str, gpus: int | None) -> dict:
    """The tenant's accelerator limit, enforced by the apiserver on pods (None: no limit)."""
    hard = {} if gpus is None else {f"requests.{resource}": str(int(gpus))}
    names.qualified_name(resource, field="accelerator resource")
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "torus-accelerators", "namespace": namespace, "labels": MANAGED},
        "spec": {"hard": hard},
    }


def resource_flavor(*, settings: KubeSettings, pool: str) -> dict:
    spec: dict = {"nodeLabels": {settings.pool_label: names.label_value(pool, field="pool")}}
    if settings.pool_taint:
        spec["tolerations"] = [pool_toleration(settings=settings, pool=pool)]
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor_name(pool=pool), "labels": MANAGED},
        "spec": spec,
    }


def cluster_queue(
    *,
    settings: KubeSettings,
    tenant: str,
    pools: list[str],
    resources: list[str],
    gpus: int | None,
) -> dict:
    """The tenant's ClusterQueue: one flavor per pool. A GPU limit is each flavor's nominal
    quota with nothing borrowed from the cohort (the ResourceQuota holds the total across
    pools); without one, the quota is nominal and idle quota is shared in the cohort. It
    admits workloads from the tenant's namespaces only. The limit is also kept as an
    annotation, so the queue can be rebuilt when pools change."""
    for resource in resources:
        names.qualified_name(resource, field="accelerator resource")
    limit = settings.unlimited_gpus if gpus is None else int(gpus)
    accelerator = {"nominalQuota": str(limit)}
    if gpus is not None:
        accelerator["borrowingLimit"] = "0"
    flavors = [
        {
            "name": flavor_name(pool=pool),
            "resources": [
                {"name": "cpu", "nominalQuota": settings.queue_cpu},
                {"name": "memory", "nominalQuota": settings.queue_memory},
                *({"name": r, **accelerator} for r in resources),
            ],
        }
        for pool in pools
    ]
    tenant = names.dns_label(tenant, field="tenant")
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {
            "name": cluster_queue_name(tenant=tenant),
            "labels": {**MANAGED, L_TENANT: tenant},
            "annotations": {A_GPU_LIMIT: "" if gpus is None else str(int(gpus))},
        },
        "spec": {
            "cohortName": settings.cohort,
            "namespaceSelector": {"matchLabels": {L_TENANT: tenant}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {"coveredResources": ["cpu", "memory", *resources], "flavors": flavors}
            ],
        },
    }


def gpu_limit_of(cluster_queue: dict) -> int | None:
    value = (cluster_queue["metadata"].get("annotations") or {}).get(A_GPU_LIMIT, "")
    return int(value) if value.isdigit() else None


def local_queue(*, namespace: str, tenant: str) -> dict:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": namespace, "labels": MANAGED},
        "spec": {"clusterQueue": cluster_queue_name(tenant=tenant)},
    }


def persistent_volume(*, settings: KubeSettings, tenant: str, project: str, namespace: str) -> dict:
    """The project's tree on the shared storage, owned by the platform: a hostPath volume
    bound ahead (claimRef) to the one claim in the tenant's namespace, so no other
    namespace's claim can bind it."""
    pv, pvc = volume_names(tenant=tenant, project=project)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv, "labels": {**MANAGED, L_TENANT: tenant, L_PROJECT: project}},
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": settings.storage_class,
            "hostPath": {
                "path": project_root(settings=settings, tenant=tenant, project=project),
                "type": "Directory",
            },
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": namespace,
                "name": pvc,
            },
        },
    }


def persistent_volume_claim(
    *, settings: KubeSettings, tenant: str, project: str, namespace: str
) -> dict:
    pv, pvc = volume_names(tenant=tenant, project=project)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": pvc,
            "namespace": namespace,
            "labels": {**MANAGED, L_TENANT: tenant, L_PROJECT: project},
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": settings.storage_class,
            "volumeName": pv,
            "resources": {"requests": {"storage": "1Ti"}},
        },
    }
