"""The Kubernetes backend: Jobs (Indexed with a headless Service when they span nodes) in
a namespace per tenant or project, admitted whole by Kueue. Jobs are followed by the
watcher (watch.py), whose records jobs() reads from Redis: a reconcile pass makes one
Kubernetes request (inventory's node list) whatever the number of jobs."""

import contextlib
import hashlib
import json
import time
from datetime import datetime

from django.conf import settings as django_settings
from django.core.cache import cache

from apps.compute.backends.base import (
    BackendJob,
    ClusterUnavailable,
    JobUsage,
    NodeInfo,
    PartitionInfo,
    Submission,
    SubmitRejected,
)
from apps.compute.backends.kubernetes import manifests, names, outcomes, pending, places
from apps.compute.backends.kubernetes.client import ApiError, KubeClient
from apps.compute.backends.kubernetes.client import path as kube_path
from apps.compute.backends.kubernetes.logs import PodLogSource
from apps.compute.backends.kubernetes.settings import KubeSettings
from apps.compute.backends.kubernetes.store import Store
from apps.compute.models import Cluster

STALE_AFTER = 30  # seconds without the watcher's heartbeat: the cluster counts as silent
PLACE_TTL = 3600


class KubernetesBackend:
    display_name = "Kubernetes"
    requires_image = True  # every job runs in a container
    dataset_node_cache = False  # pods mount only the project's volume: versions read in place
    reserved_env_prefixes = ()
    # label prefixes Kubernetes and its add-ons own: node.kubernetes.io/...,
    # kueue.x-k8s.io/queue-name (also kwok's x-k8s.io)
    reserved_label_domains = ("kubernetes.io", "k8s.io")

    @classmethod
    def job_environment(cls, *, config: dict) -> dict[str, str]:
        return {}

    @classmethod
    def serving_problem(cls, *, config: dict) -> str:
        """The engine lies in the cluster's serving image (manifests.serving)."""
        if not config.get("serving_image"):
            return "has no serving image (config.serving_image): it runs no deployments."
        return ""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.settings = KubeSettings.from_config(
            cluster.config, job_root=str(getattr(django_settings, "TORUS_JOB_ROOT", ""))
        )
        self.store = Store(cluster.pk)
        self._client = None
        # within one backend object (a dispatch pass): what the cache said, asked once
        self._pools: list[str] | None = None
        self._apiserver: list[str] | None = None
        self._placed: dict[tuple[str, str], str] = {}

    @property
    def client(self) -> KubeClient:
        if self._client is None:
            self._client = KubeClient(self.settings)
        return self._client

    # -- the tenant's place -----------------------------------------------------------------

    def pools(self) -> list[str]:
        """The pools (node label values), cached a minute."""
        if self._pools is not None:
            return self._pools
        key = f"torus:k8s:{self.cluster.pk}:pools"
        found = cache.get(key)
        if found is None:
            nodes = self.client.get("Node").get("items") or []
            found = sorted(
                {(n["metadata"].get("labels") or {}).get(self.settings.pool_label) for n in nodes}
                - {None}
            )
            cache.set(key, found, timeout=60)
        self._pools = found
        return found

    def accelerator_resources(self) -> list[str]:
        from apps.compute.models import AcceleratorType

        found = AcceleratorType.objects.exclude(resource_name="").values_list(
            "resource_name", flat=True
        )
        return sorted(names.qualified_name(r, field="accelerator resource") for r in found)

    def apiserver_addresses(self) -> list[str]:
        """The apiserver as a pod reaches it: the `kubernetes` Service's cluster IPs and its
        endpoints (a CNI may apply policy before or after the Service's address is
        translated), as /32 and /128 networks; cached ten minutes. A cluster without the
        EndpointSlice (an apiserver on loopback) gives the Service's addresses only."""
        if self._apiserver is not None:
            return self._apiserver
        key = f"torus:k8s:{self.cluster.pk}:apiserver"
        found = cache.get(key)
        if found is None:
            service = self.client.get("Service", namespace="default", name="kubernetes")
            spec = service.get("spec") or {}
            addresses = set(spec.get("clusterIPs") or [spec.get("clusterIP")])
            try:
                sliced = self.client.get("EndpointSlice", namespace="default", name="kubernetes")
            except ApiError as exc:  # none where the apiserver advertises a loopback address
                if exc.status != 404:
                    raise
                sliced = {}
            for endpoint in sliced.get("endpoints") or []:
                addresses.update(endpoint.get("addresses") or [])
            found = sorted(
                names.cidr(a, field="the apiserver's address")
                for a in addresses
                if a and a != "None"
            )
            if not found:
                raise ClusterUnavailable("the apiserver's Service has no address")
            cache.set(key, found, timeout=600)
        self._apiserver = found
        return found

    def place_objects(self, *, tenant: str, project: str) -> list[dict]:
        """The tenant's namespace with its guard rails and queue, and the project's volume
        (the quota objects: tenant_gpu_limit)."""
        s = self.settings
        ns = manifests.namespace_name(settings=s, tenant=tenant, project=project)
        per_project = project if s.namespace_per == "project" else None
        objects = [
            places.namespace(name=ns, tenant=tenant, project=per_project),
            places.network_policy(namespace=ns),
            places.egress_policy(settings=s, namespace=ns, apiserver=self.apiserver_addresses()),
            places.persistent_volume(settings=s, tenant=tenant, project=project, namespace=ns),
            places.persistent_volume_claim(
                settings=s, tenant=tenant, project=project, namespace=ns
            ),
        ]
        if s.kueue:
            objects[1:1] = [places.resource_flavor(settings=s, pool=p) for p in self.pools()]
            objects.append(places.local_queue(namespace=ns, tenant=tenant))
        return objects

    def ensure_place(self, *, tenant: str, project: str) -> str:
        """Bring the tenant's place to its state; remembered in the cache (by the objects'
        digest: a new pool makes it again), so a submit after the first costs no request."""
        if (tenant, project) in self._placed:
            return self._placed[(tenant, project)]
        objects = self.place_objects(tenant=tenant, project=project)
        text = json.dumps(objects, sort_keys=True).encode()
        digest = hashlib.sha256(text).hexdigest()[:16]
        key = f"torus:k8s:{self.cluster.pk}:place:{tenant}:{project}:{digest}"
        ns = objects[0]["metadata"]["name"]
        if cache.get(key):
            self._placed[(tenant, project)] = ns
            return ns
        for obj in objects:
            self.client.apply(obj)
        if self.settings.kueue:  # with the pools of now, keeping the tenant's limit
            try:
                current = self.client.get(
                    "ClusterQueue", name=manifests.cluster_queue_name(tenant=tenant)
                )
                gpus = places.gpu_limit_of(current)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                gpus = None
            self._apply_quota(tenant=tenant, gpus=gpus, namespaces=[ns] if gpus is None else None)
        cache.set(key, True, timeout=PLACE_TTL)
        self._placed[(tenant, project)] = ns
        return ns

    def ensure_association(self, *, user: str, account: str, parent: str) -> None:
        """Nothing per user on Kubernetes: pods run as the submitter's uid (securityContext)
        and the tenant's place is made by submit() from the submission's slugs."""

    def tenant_gpu_limit(self, *, tenant: str, account: str, gpus: int | None) -> None:
        """The tenant's ClusterQueue quota and its namespaces' ResourceQuota."""
        self._apply_quota(tenant=tenant, gpus=gpus)

    def _apply_quota(self, *, tenant: str, gpus: int | None, namespaces=None) -> None:
        s = self.settings
        resources = self.accelerator_resources()
        if s.kueue:
            queue = places.cluster_queue(
                settings=s, tenant=tenant, pools=self.pools(), resources=resources, gpus=gpus
            )
            self.client.apply(queue)
        if namespaces is None:
            query = {
                "labelSelector": f"{manifests.L_TENANT}={names.dns_label(tenant, field='tenant')}"
            }
            found = self.client.get("Namespace", query=query).get("items") or []
            namespaces = [item["metadata"]["name"] for item in found]
        for ns in namespaces:
            for resource in resources[:1]:
                self.client.apply(places.resource_quota(namespace=ns, resource=resource, gpus=gpus))

    # -- jobs -------------------------------------------------------------------------------

    def submit(self, submission: Submission) -> str:
        self.ensure_place(tenant=submission.tenant, project=submission.project)
        ns, job = manifests.job(settings=self.settings, submission=submission, pools=self.pools())
        name = job["metadata"]["name"]
        try:
            created = self.client.create(job)
        except ApiError as exc:
            if exc.status != 409:
                raise SubmitRejected(str(exc)) from exc
            created = self.client.get("Job", namespace=ns, name=name)  # submitted before
            if (created["metadata"].get("annotations") or {}).get(
                manifests.A_TAG
            ) != submission.tag:
                raise SubmitRejected(f"a Job {ns}/{name} exists for another attempt") from exc
        if submission.secrets:
            self._create_secret(job=job, created=created, values=submission.secrets)
        if submission.nodes > 1:
            svc = manifests.service(job=job, owner_uid=created["metadata"]["uid"])
            try:
                self.client.create(svc)
            except ApiError as exc:
                if exc.status != 409:
                    raise SubmitRejected(str(exc)) from exc
        return f"{ns}/{name}"

    def _create_secret(self, *, job: dict, created: dict, values: dict[str, str]) -> None:
        """The attempt's Secret, owned by its Job (the pod waits for it: its env reads it).
        The platform may create and delete Secrets, never read or list them (RBAC). One
        left by an earlier try of this submit is replaced; failing, the Job goes too."""
        secret = manifests.job_secret(job=job, owner_uid=created["metadata"]["uid"], values=values)
        meta = secret["metadata"]
        try:
            try:
                self.client.create(secret)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                self.client.delete("Secret", namespace=meta["namespace"], name=meta["name"])
                self.client.create(secret)
        except ApiError as exc:
            with contextlib.suppress(ApiError):  # the pod would wait for it for ever
                self.client.delete("Job", namespace=meta["namespace"], name=meta["name"])
            raise SubmitRejected(f"the job's Secret: HTTP {exc.status}") from None

    def _records(self, *, tag: str | None = None) -> dict[str, dict]:
        records, beat = self.store.read(tag=tag)
        if beat is None or time.time() - beat > STALE_AFTER:
            age = "never" if beat is None else f"{int(time.time() - beat)} s ago"
            name = self.cluster.name
            raise ClusterUnavailable(
                f"the watch of cluster {name} last reported {age} (is kube_watch running?)"
            )
        return records

    def jobs(self) -> list[BackendJob]:
        return [outcomes.backend_job(r) for r in self._records().values()]

    def accounting(self, *, tags: set[str], since: datetime) -> list[BackendJob]:
        return [outcomes.backend_job(r) for r in self.store.gone(tags)]

    def cancel(self, backend_id: str) -> None:
        ns, name = names.split_id(backend_id)
        try:
            self.client.delete("Job", namespace=ns, name=name)
        except ApiError as exc:
            if exc.status != 404:
                raise ClusterUnavailable(str(exc)) from exc

    def account_remove(self, *, account: str) -> None:
        """Nothing per account on Kubernetes (ensure_association makes none)."""

    def objects_remove(self, *, tenant: str, project: str | None, backend_ids: list[str]) -> None:
        """The attempts' Jobs (their Secrets and Services are owned by them), and with
        `project` every Job, pod, Service and Secret labelled with the tenant's project."""
        for backend_id in backend_ids:
            self.cancel(backend_id)
        if project is None:
            return
        ns = manifests.namespace_name(settings=self.settings, tenant=tenant, project=project)
        selector = (
            f"{manifests.L_TENANT}={names.dns_label(tenant, field='tenant')},"
            f"{manifests.L_PROJECT}={names.dns_label(project, field='project')}"
        )
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        for kind in ("Job", "Pod", "Service", "Secret"):
            try:
                self.client.request(
                    "DELETE", kube_path(kind, namespace=ns), query={"labelSelector": selector},
                    body=body,
                )  # fmt: skip
            except ApiError as exc:
                if exc.status != 404:
                    raise ClusterUnavailable(str(exc)) from exc

    def clear_nice(self, backend_id: str) -> None:
        """Nothing: Kueue orders by its own priority classes, no nice is ever set."""

    def ping(self) -> None:
        self.client.request("GET", "/version")

    def inventory(self) -> tuple[list[PartitionInfo], list[NodeInfo]]:
        from apps.compute.models import AcceleratorType

        gres = dict(
            AcceleratorType.objects.exclude(resource_name="").values_list(
                "resource_name", "gres_name"
            )
        )
        items = self.client.get("Node").get("items") or []
        pool_label = self.settings.pool_label
        nodes, pools = [], {}
        for item in items:
            meta, status = item["metadata"], item.get("status") or {}
            labels = meta.get("labels") or {}
            ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
            cordoned = bool((item.get("spec") or {}).get("unschedulable"))
            state = "READY" if ready.get("status") == "True" else "DOWN"
            if cordoned:
                state += "+DRAIN"
            pool = labels.get(pool_label, "")
            if pool:
                pools.setdefault(pool, []).append(meta["name"])
            capacity = status.get("allocatable") or status.get("capacity") or {}
            accelerators = {}
            for resource, gres_name in gres.items():
                if int(capacity.get(resource, 0) or 0):
                    kind = labels.get(f"{resource}.product", "")
                    accelerators.setdefault(gres_name, {})[kind] = int(capacity[resource])
            nodes.append(
                NodeInfo(
                    name=meta["name"],
                    address=next((a["address"] for a in status.get("addresses") or []), ""),
                    partitions=[pool] if pool else [],
                    cpus=_cpus(capacity.get("cpu", "0")),
                    memory_mb=_mebibytes(capacity.get("memory", "0")),
                    accelerators=accelerators,
                    accelerators_in_use={},
                    state=state,
                    reason=ready.get("message", "") if state != "READY" else "",
                    healthy=state == "READY",
                )
            )
        present = {n.name for n in nodes}
        for name in sorted(set(self.store.read_lost_nodes()) - present):
            nodes.append(
                NodeInfo(
                    name=name, address="", partitions=[], cpus=0, memory_mb=0, accelerators={},
                    accelerators_in_use={}, state="DOWN+GONE", reason="the node left the cluster",
                    healthy=False,
                )
            )  # fmt: skip
        partitions = [
            PartitionInfo(
                name=p, is_default=False, state="UP", max_time_minutes=None, node_names=sorted(n)
            )
            for p, n in sorted(pools.items())
        ]
        return partitions, nodes

    def attempt_outcome(self, job: BackendJob) -> str:
        return outcomes.attempt_state(job.state)

    def waiting_message(self, job: BackendJob) -> str:
        return pending.waiting_message(
            state=job.state, reason=job.reason, position=job.queue_position
        )

    def log_source(self) -> PodLogSource:
        return PodLogSource(self)

    def usage(self, *, owners: dict[str, tuple[str, int]]) -> dict[str, JobUsage]:
        """Not read yet: a pod's usage comes from metrics.k8s.io (metrics-server), which a
        cluster of kwok nodes (no container runs) cannot serve to test it against."""
        return {}

    def serve_host(self, tag: str) -> str | None:
        """The IP of the replica's pod, as the apiserver gave it to the watcher."""
        record = self._records(tag=tag).get(tag) or {}
        hosts = record.get("hosts") or []
        return hosts[0] if hosts and hosts[0] else None


def _cpus(value: str) -> int:
    value = str(value)
    return int(value[:-1]) // 1000 if value.endswith("m") else int(float(value))


UNITS = {
    "Ki": 1 / 1024,
    "Mi": 1,
    "Gi": 1024,
    "Ti": 1024**2,
    "K": 1 / 1048.576,
    "M": 1 / 1.048576,
    "G": 953.67431640625,
}


def _mebibytes(value: str) -> int:
    value = str(value)
    for suffix, factor in UNITS.items():
        if value.endswith(suffix):
            return int(float(value[: -len(suffix)]) * factor)
    return int(float(value) / 1048576)
