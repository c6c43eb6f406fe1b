"""Kubernetes objects as plain dicts (pure functions, no client calls). Every value that
comes from outside is checked by `names` on its way in; the client sends these as JSON."""

import base64
import ipaddress
from pathlib import Path

from apps.compute.backends.base import Submission, SubmitRejected
from apps.compute.backends.kubernetes import names
from apps.compute.backends.kubernetes.settings import KubeSettings

LAUNCHER = (Path(__file__).with_name("launcher.sh")).read_text()
TAG_PREFIX = "torus:"
MANAGED = {"app.kubernetes.io/managed-by": "torus"}
L_TENANT, L_PROJECT, L_ATTEMPT = "torus.io/tenant", "torus.io/project", "torus.io/attempt-id"
A_TAG, A_NAME, A_GPU_LIMIT = "torus.io/tag", "torus.io/name", "torus.io/gpu-limit"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
LOCAL_QUEUE = "torus"
KUEUE = "kueue.x-k8s.io/v1beta2"


# -- names ---------------------------------------------------------------------------------


def namespace_name(*, settings: KubeSettings, tenant: str, project: str) -> str:
    if settings.namespace_per == "project":
        return names.bounded_label("torus", tenant, project, field="namespace")
    return names.bounded_label("torus", tenant, field="namespace")


def cluster_queue_name(*, tenant: str) -> str:
    return names.bounded_label("torus", tenant, field="cluster queue")


def flavor_name(*, pool: str) -> str:
    return names.bounded_label("pool", pool, field="resource flavor")


def volume_names(*, tenant: str, project: str) -> tuple[str, str]:
    """(PersistentVolume, PersistentVolumeClaim) of a project's tree."""
    return (
        names.bounded_label("torus", tenant, project, field="persistent volume"),
        names.bounded_label("project", project, field="persistent volume claim"),
    )


def attempt_of(tag: str) -> str:
    """The attempt id a tag carries, as a label value."""
    if not isinstance(tag, str) or not tag.startswith(TAG_PREFIX):
        raise names.InvalidValue("tag", f"{tag!r} is not a Torus tag")
    return names.label_value(tag[len(TAG_PREFIX) :], field="tag")


def job_name(*, tag: str) -> str:
    """A Job's name from its attempt id; user text never names an object."""
    return names.bounded_label("t", attempt_of(tag).lower(), field="job name")


def project_root(*, settings: KubeSettings, tenant: str, project: str) -> str:
    if not settings.job_root:
        raise SubmitRejected("the cluster's config has no job_root for the projects' trees")
    return names.absolute_path(f"{settings.job_root.rstrip('/')}/{tenant}/{project}", field="path")


# -- the tenant's place ----------------------------------------------------------------------


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


# -- a job ---------------------------------------------------------------------------------


def pool_toleration(*, settings: KubeSettings, pool: str) -> dict:
    return {"key": settings.pool_label, "operator": "Equal", "value": pool, "effect": "NoSchedule"}


def pod_security(submission: Submission) -> tuple[dict, dict]:
    """(pod, container) security contexts: always these, whatever the submission says."""
    if submission.uid < 1000 or submission.gid < 1000:
        raise SubmitRejected("a job needs its submitter's POSIX identity; root is refused")
    pod = {
        "runAsUser": int(submission.uid),
        "runAsGroup": int(submission.gid),
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "runAsUser": int(submission.uid),
        "runAsGroup": int(submission.gid),
        "runAsNonRoot": True,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return pod, container


def _kwok_annotations(settings: KubeSettings) -> dict[str, str]:
    out = {}
    for stage, delay in settings.kwok_delays.items():
        out[f"{stage}.stage.kwok.x-k8s.io/delay"] = delay
        out[f"{stage}.stage.kwok.x-k8s.io/jitter-delay"] = delay  # jitter is the upper bound
    return out


def job_environment(*, submission: Submission, name: str, namespace: str) -> dict[str, str]:
    """The submission's environment plus what the launcher derives the ranks from."""
    master = "127.0.0.1" if submission.nodes == 1 else f"{name}-0.{name}.{namespace}.svc"
    return {
        **submission.environment,
        "TORUS_NNODES": str(int(submission.nodes)),
        "TORUS_TASKS_PER_NODE": str(int(submission.tasks_per_node)),
        "TORUS_MASTER_ADDR": master,
    }


def serving(*, settings: KubeSettings) -> tuple[str, list[dict]]:
    """(image, env) of a model deployment's replica: the cluster's serving image, and where its
    engine lies and listens (the pod's own IP, from the downward API; apps/serving/replicas.py
    reads these)."""
    if not settings.serving_image:
        raise SubmitRejected(
            "this cluster runs no model deployments (its config has no serving_image)"
        )
    env = names.environment(
        {
            "TORUS_SERVE_ENGINE": settings.serving_engine,
            "TORUS_SERVE_PORT": str(settings.serving_port),
        }
    )
    env.append(
        {"name": "TORUS_SERVE_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    )
    return settings.serving_image, env


def job(
    *, settings: KubeSettings, submission: Submission, pools: list[str] | None = None
) -> tuple[str, dict]:
    """(namespace, Job) for one attempt: a batch/v1 Job, Indexed with one pod per node when
    it spans nodes (its headless Service: `service`)."""
    s = submission
    tenant = names.dns_label(s.tenant, field="tenant")
    project = names.dns_label(s.project, field="project")
    ns = namespace_name(settings=settings, tenant=tenant, project=project)
    name = job_name(tag=s.tag)
    if s.nodes < 1 or s.tasks_per_node < 1 or s.cpus_per_task < 1 or s.memory_mb_per_node < 1:
        raise names.InvalidValue("resources", "nodes, tasks, cpus and memory must be positive")
    if s.time_limit_minutes < 1:
        raise names.InvalidValue("time_limit", "must be positive")
    image = names.image(s.image or settings.default_image, field="image")
    environment = names.environment(job_environment(submission=s, name=name, namespace=ns))
    environment += secret_environment(submission=s, secret=name)
    if s.kind == "serve":
        image, serving_env = serving(settings=settings)
        environment += serving_env
    root = project_root(settings=settings, tenant=tenant, project=project)
    workdir = names.absolute_path(s.working_dir, field="working_dir")
    if not names.within(workdir, root):
        raise names.InvalidValue("working_dir", f"must be inside the project's tree {root}")
    pod_security_context, container_security = pod_security(s)
    meta_labels = {
        **names.labels(dict(s.labels), field="labels"),
        **MANAGED,
        L_TENANT: tenant,
        L_PROJECT: project,
        L_ATTEMPT: attempt_of(s.tag),
    }
    annotations = {A_TAG: s.tag, A_NAME: names.text(s.name, field="name", limit=1024)}
    resources: dict[str, str] = {
        "cpu": str(int(s.cpus_per_task) * int(s.tasks_per_node)),
        "memory": f"{int(s.memory_mb_per_node)}Mi",
    }
    if s.accelerators_per_node:
        resource = names.qualified_name(s.accelerator_resource or "", field="accelerator resource")
        resources[resource] = str(int(s.accelerators_per_node))
    pod_spec: dict = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context,
        "containers": [
            {
                "name": "main",
                "image": image,
                "command": ["/bin/bash", "-c", LAUNCHER, "torus-launcher"],
                "env": environment,
                "workingDir": workdir,
                "resources": {"requests": resources, "limits": resources},
                "securityContext": container_security,
                "volumeMounts": [{"name": "project", "mountPath": root}],
            }
        ],
        "volumes": [
            {
                "name": "project",
                "persistentVolumeClaim": {
                    "claimName": volume_names(tenant=tenant, project=project)[1]
                },
            }
        ],
    }
    if s.partition:
        pool = names.label_value(s.partition, field="partition")
        if pools is not None and pool not in pools:
            raise names.InvalidValue("partition", f"no pool {pool!r} on this cluster")
        pod_spec["nodeSelector"] = {settings.pool_label: pool}
        if settings.pool_taint:
            pod_spec["tolerations"] = [pool_toleration(settings=settings, pool=pool)]
    if s.exclude_nodes:
        excluded = [names.dns_subdomain(n, field="exclude_nodes") for n in s.exclude_nodes]
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "NotIn", "values": excluded}
                            ]
                        }
                    ]
                }
            }
        }
    spec: dict = {
        "backoffLimit": 0,  # the platform restarts attempts itself, from checkpoints
        "parallelism": int(s.nodes),
        "completions": int(s.nodes),
        "activeDeadlineSeconds": int(s.time_limit_minutes) * 60,
        "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
        "template": {
            "metadata": {"labels": meta_labels, "annotations": _kwok_annotations(settings)},
            "spec": pod_spec,
        },
    }
    if s.nodes > 1:
        spec["completionMode"] = "Indexed"
        pod_spec["subdomain"] = name  # pods are <name>-<index>.<name>.<ns>.svc
    job_labels = dict(meta_labels)
    if settings.kueue:
        job_labels[QUEUE_LABEL] = LOCAL_QUEUE
        spec["suspend"] = True  # Kueue unsuspends it once the whole job is admitted
    return ns, {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": job_labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def secret_environment(*, submission: Submission, secret: str) -> list[dict]:
    """The container's env entries of the submission's secrets: each read from the attempt's
    Secret (`job_secret`, named as its Job) through secretKeyRef, never a value."""
    out = []
    for key in submission.secrets:
        if submission.environment.get(key) is not None:
            raise names.InvalidValue("secrets", f"{key} is also a plain variable")
        names.environment({key: ""}, field="secrets")  # a variable name
        ref = {"name": secret, "key": key}
        out.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    return out


def _owned_by(job: dict, owner_uid: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job["metadata"]["name"],
        "uid": names.label_value(owner_uid, field="owner uid"),
        "blockOwnerDeletion": True,
    }


def job_secret(*, job: dict, owner_uid: str, values: dict[str, str]) -> dict:
    """The Secret an attempt's container reads its secrets from (`secret_environment`): in
    the tenant's namespace, named as the Job and owned by it (deleting the Job deletes it)."""
    meta = job["metadata"]
    data = {}
    for key, value in values.items():
        names.environment({key: value}, field="secrets")  # a variable name, a text value
        data[key] = base64.b64encode(value.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "immutable": True,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {k: v for k, v in meta["labels"].items() if k != QUEUE_LABEL},
            "ownerReferences": [_owned_by(job, owner_uid)],
        },
        "data": data,
    }


def service(*, job: dict, owner_uid: str) -> dict:
    """The headless Service that gives an Indexed Job's pods their DNS names; owned by the
    Job, so deleting the Job deletes it."""
    meta = job["metadata"]
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "uid": names.label_value(owner_uid, field="owner uid"),
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {k: v for k, v in meta["labels"].items() if k != QUEUE_LABEL},
            "ownerReferences": [owner],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {L_ATTEMPT: meta["labels"][L_ATTEMPT]},
        },
    }
