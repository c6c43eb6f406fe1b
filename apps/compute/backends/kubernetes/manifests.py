"""Kubernetes objects of a job as plain dicts (pure functions, no client calls), and the
names of every object (a tenant's place: places.py). Every value that comes from outside is
checked by `names` on its way in; the client sends these as JSON."""

import base64
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
