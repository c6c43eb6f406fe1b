"""Helpers for the backend tests on the local control plane: a Cluster row for it, fake
kwok nodes of the test's own (its own pool, so other tests' nodes are never touched), a
watcher in a thread, and waiting for what the watcher reports."""

import time
import uuid

from django.core.cache import cache
from kubernetes import client

from apps.compute.backends.base import Submission
from apps.compute.backends.kubernetes.backend import KubernetesBackend
from apps.compute.backends.kubernetes.watch import ClusterWatch
from apps.compute.models import AcceleratorType, Backend, Cluster

NVIDIA = {
    "name": "nvidia-gpu",
    "vendor": "NVIDIA",
    "resource_name": "nvidia.com/gpu",
    "visible_devices_env": "CUDA_VISIBLE_DEVICES",
}
# kwok runs no container, so nothing is pulled; the name only has to be valid
IMAGE = "registry.invalid/torus/runtime:latest"


def make_cluster(kube_env, *, job_root: str, name: str | None = None, **config) -> Cluster:
    AcceleratorType.objects.update_or_create(gres_name="gpu", defaults=NVIDIA)
    base = {
        "api_url": kube_env.api_url,
        "ca_file": kube_env.ca_file,
        "token_file": kube_env.token_file,
        "namespace_per": "tenant",
        "kueue": True,
        "default_image": IMAGE,
        "job_root": job_root,
        "kwok_delays": {"pod-create": "0s", "pod-ready": "0s", "pod-complete": "2s"},
        "visibility_url": kube_env.visibility_url,
    }
    return Cluster.objects.create(
        name=name or f"k8s-{uuid.uuid4().hex[:8]}",
        backend=Backend.KUBERNETES,
        supports_containers=True,
        config=base | config,
    )


def add_node(kube_admin, *, pool: str, gpus: int = 8, name: str | None = None) -> str:
    name = name or f"kd-{uuid.uuid4().hex[:8]}"
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    node = client.V1Node(
        metadata=client.V1ObjectMeta(
            name=name,
            annotations={"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            labels={
                "kubernetes.io/hostname": name,
                "type": "kwok",
                "torus.io/pool": pool,
                "torus.io/test": "true",
            },
        ),
        status=client.V1NodeStatus(capacity=capacity, allocatable=capacity),
    )
    core = client.CoreV1Api(kube_admin)
    core.create_node(node)
    wait_for(lambda: _ready(core.read_node(name)), what=f"node {name} Ready")
    return name


def _ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def forget_pools(cluster: Cluster) -> None:
    cache.delete(f"torus:k8s:{cluster.pk}:pools")


def wait_for(check, *, what: str, timeout: float = 60, interval: float = 0.1, explain=None):
    """Poll `check` until it returns something true; on timeout fail, saying what was
    awaited and (`explain()`) what the cluster holds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f"\n{explain()}" if explain else ""
            raise AssertionError(f"timed out waiting for {what}{detail}")
        time.sleep(interval)


def start_watch(backend: KubernetesBackend, *, watch_timeout: int = 10) -> ClusterWatch:
    watch = ClusterWatch(
        cluster_id=backend.cluster.pk, settings=backend.settings, watch_timeout=watch_timeout
    ).start()
    watch.wait_synced()
    wait_for(lambda: backend.store.read()[1], what="the watcher's first heartbeat")
    return watch


def record_of(backend: KubernetesBackend, tag: str):
    return next((j for j in backend.jobs() if j.tag == tag), None)


def wait_state(
    backend: KubernetesBackend, tag: str, states: set[str], *, timeout: float = 60, explain=None
):
    seen = []

    def check():
        found = record_of(backend, tag) or next(
            iter(backend.accounting(tags={tag}, since=None)), None
        )
        if found and (not seen or seen[-1] != found.state):
            seen.append(found.state)
        return found if found and found.state in states else None

    def detail() -> str:
        said = f"the watcher said {' -> '.join(seen) or 'nothing'}"
        return said + (f"\n{explain()}" if explain else "")

    return wait_for(check, what=f"{tag} in {states}", timeout=timeout, explain=detail)


def submission(*, tenant: str, project: str, job_root: str, **overrides) -> Submission:
    base = dict(
        tag=f"torus:{uuid.uuid4()}",
        name="train",
        environment={"TORUS_ARGV": "true", "TORUS_LAUNCHER": "none"},
        nodes=1,
        tasks_per_node=1,
        cpus_per_task=1,
        memory_mb_per_node=1024,
        time_limit_minutes=30,
        accelerators_per_node=4,
        accelerator_resource="nvidia.com/gpu",
        working_dir=f"{job_root}/{tenant}/{project}/jobs/1",
        user="alice",
        uid=20001,
        gid=30001,
        tenant=tenant,
        project=project,
    )
    return Submission(**(base | overrides))


def served(call, *args, timeout: float = 60.0, **kwargs):
    """`call(*args, **kwargs)`, again while the apiserver answers 429 or 503: a restarted
    apiserver serves a resource's requests only once its storage has (re)initialised, and
    says so with a Retry-After, which a client follows."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call(*args, **kwargs)
        except client.ApiException as exc:
            if exc.status not in (429, 503) or time.monotonic() > deadline:
                raise
            time.sleep(1)


def delete_tenant_objects(kube_admin, tenant: str) -> None:
    """What the backend made for a test tenant: its namespace (and so its Jobs), its
    ClusterQueue and its projects' volumes."""
    core = client.CoreV1Api(kube_admin)
    custom = client.CustomObjectsApi(kube_admin)
    selector = f"torus.io/tenant={tenant}"
    for ns in served(core.list_namespace, label_selector=selector).items:
        served(core.delete_namespace, ns.metadata.name, propagation_policy="Background")
    for pv in served(core.list_persistent_volume, label_selector=selector).items:
        served(core.delete_persistent_volume, pv.metadata.name)
    queues = ("kueue.x-k8s.io", "v1beta2", "clusterqueues")
    for cq in served(custom.list_cluster_custom_object, *queues, label_selector=selector)["items"]:
        served(custom.delete_cluster_custom_object, *queues, cq["metadata"]["name"])


def cluster_view(kube_admin, *, tenant: str, pool: str) -> str:
    """What the control plane holds for a test tenant (its Jobs, Workloads and pods) and
    its pool's nodes, one line each: a timed-out wait says where a job stopped."""
    core = client.CoreV1Api(kube_admin)
    batch = client.BatchV1Api(kube_admin)
    custom = client.CustomObjectsApi(kube_admin)
    lines = []

    def conditions(items) -> str:
        return ", ".join(
            f"{c['type']}={c['status']}({c.get('reason') or ''}: {c.get('message') or ''})"
            for c in items or []
        )

    try:
        for ns in core.list_namespace(label_selector=f"torus.io/tenant={tenant}").items:
            name = ns.metadata.name
            for job in batch.list_namespaced_job(name).items:
                status = kube_admin.sanitize_for_serialization(job.status) or {}
                lines.append(
                    f"Job {name}/{job.metadata.name} suspend={job.spec.suspend} "
                    f"active={status.get('active', 0)} {conditions(status.get('conditions'))}"
                )
            for w in custom.list_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", name, "workloads"
            )["items"]:
                state = conditions((w.get("status") or {}).get("conditions"))
                lines.append(f"Workload {name}/{w['metadata']['name']} {state}")
            for pod in core.list_namespaced_pod(name).items:
                status = kube_admin.sanitize_for_serialization(pod.status) or {}
                lines.append(
                    f"Pod {name}/{pod.metadata.name} node={pod.spec.node_name} "
                    f"phase={status.get('phase')} {conditions(status.get('conditions'))}"
                )
        for node in core.list_node(label_selector=f"torus.io/pool={pool}").items:
            status = kube_admin.sanitize_for_serialization(node.status) or {}
            ready = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
            taints = [f"{t.key}:{t.effect}" for t in node.spec.taints or []]
            lines.append(f"Node {node.metadata.name} {conditions(ready)} taints={taints}")
    except Exception as exc:  # the view is for the failure message: never hide the failure
        lines.append(f"(the cluster did not answer: {exc})")
    return "\n".join(lines) or "(nothing for this tenant)"
