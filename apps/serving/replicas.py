"""Replicas: each one long-lived job of kind `serve` running the engine as the deploying user.

The job's command is a fixed script (SERVE_SCRIPT) whose every variable part arrives as an argv
item (data, never script text): the engine binary, the model file, the slot count, the context
per slot, the KV-cache type. The script takes a free port on 127.0.0.1, writes
{"host", "port"} to $HOME/serve.json (HOME is the job's directory) and execs llama-server
there. The engine key reaches the job in its environment (LLAMA_API_KEY, set by the
dispatcher: serve_environment), never in argv or the database.

The reconciler (apps/serving/reconcile.py) reads serve.json, probes /health and a one-token
completion before the replica takes traffic, and /metrics for autoscaling.
"""

import json
import logging
from pathlib import Path

import httpx
from django.conf import settings
from django.db import transaction
from rest_framework import serializers

from apps.identity import tree
from apps.identity.storage import tenant_root
from apps.jobs import paths
from apps.jobs.models import Job, Kind
from apps.jobs.states import TERMINAL
from apps.jobs.wake import request_cancel
from apps.serving.keys import engine_key
from apps.serving.models import Deployment, Replica, ReplicaState

logger = logging.getLogger(__name__)

# $1 engine, $2 model file, $3 slots, $4 context per slot, $5 KV-cache type, $6 model alias,
# $7 CPUs (the count the backend's launcher allotted, TORUS_CPUS_PER_TASK, wins).
# Where the cluster says where the engine lies and listens (Kubernetes: the serving image's
# engine, the pod's IP and a fixed port: apps/compute/backends/kubernetes/manifests.serving),
# TORUS_SERVE_* set them; otherwise the node's engine on a free loopback port.
SERVE_SCRIPT = r"""set -euo pipefail
host=${TORUS_SERVE_HOST:-127.0.0.1}
port=${TORUS_SERVE_PORT:-}
if [[ -z "$port" ]]; then
  port=$(python3 -I -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
fi
printf '{"host": "%s", "port": %d}\n' "$host" "$port" > "$HOME/serve.json.tmp"
mv -f "$HOME/serve.json.tmp" "$HOME/serve.json"
exec "${TORUS_SERVE_ENGINE:-$1}" --model "$2" --alias "$6" --host "$host" --port "$port" \
  --parallel "$3" --ctx-size $(( $3 * $4 )) --cache-type-k "$5" --cache-type-v "$5" \
  --threads "${TORUS_CPUS_PER_TASK:-$7}" --metrics --no-webui
"""
INFO_FILE = "serve.json"
INFO_MAX_BYTES = 4096
NO_TIME_LIMIT_MIN = 366 * 24 * 60  # the most a job spec allows; Slurm's MaxTime may cap it


def model_file(version) -> str:
    """The .gguf file of a version (its path inside the version); '' when it has none."""
    names = sorted(
        version.files.filter(path__iendswith=".gguf").values_list("path", flat=True),
        key=lambda p: (p.count("/"), p),
    )
    return names[0] if names else ""


def replica_spec(*, deployment: Deployment, version) -> dict:
    """The job spec of one replica, validated as any job's spec is."""
    from apps.jobs.inference import model_path
    from apps.jobs.spec import JobSpecSerializer

    gguf = model_file(version)
    if not gguf:
        raise serializers.ValidationError(
            {"model": [f"Version {version} has no .gguf file for the llama.cpp runtime."]}
        )
    argv = [
        "bash",
        "-c",
        SERVE_SCRIPT,
        "torus-serve",
        settings.TORUS_LLAMA_SERVER,
        str(model_path(version) / gguf),
        str(deployment.slots),
        str(deployment.context),
        deployment.kv_cache_type,
        f"{version.model.name}:{version.number}",
        str(deployment.cpus),
    ]
    resources = {
        "nodes": 1,
        "tasks_per_node": 1,
        "cpus_per_task": deployment.cpus,
        "memory": deployment.memory_mb,
        "gpus_per_node": deployment.gpus,
        "accelerator": deployment.accelerator,
        "time_limit": NO_TIME_LIMIT_MIN,
    }
    if deployment.gpu_type:
        resources["gpu_type"] = deployment.gpu_type
    if deployment.partition:
        resources["partition"] = deployment.partition
    raw = {
        "project": str(deployment.project_id),
        "name": f"serve-{deployment.name}"[:64],
        "kind": Kind.SERVE,
        "command": argv,
        "resources": resources,
        # the deployment's reconciler replaces a replica that ends, not the jobs' restarts
        "restart_policy": {"max_restarts": 0},
        "labels": {"serving/deployment": str(deployment.pk)[:63]},
    }
    if deployment.cluster_id:
        raw["cluster"] = deployment.cluster.name
    spec = JobSpecSerializer(data=raw)
    spec.is_valid(raise_exception=True)
    data = dict(spec.validated_data)
    data["model"] = str(version.pk)  # dispatch records it on the attempt (lineage)
    return data


def replica_start(*, deployment: Deployment, version, reason: str) -> Replica:
    """A new replica and its job, submitted as the deploying user (admission, quotas and
    GPU-hours apply as to any job), committed together so the dispatcher never sees the job
    without its replica. A refused submission raises (ValidationError, PermissionDenied)."""
    from apps.jobs.services import job_submit
    from apps.tenancy.access import actor_for_user

    spec = replica_spec(deployment=deployment, version=version)
    actor = actor_for_user(user=deployment.created_by)
    with transaction.atomic():
        job = job_submit(actor=actor, project=deployment.project, spec=spec)
        return Replica.objects.create(
            deployment=deployment, version=version, job=job, state_reason=reason
        )


def replica_cancel(*, replica: Replica) -> None:
    """Cancel a replica's job (the platform's doing, not a user's: no authorisation); its
    attempt on the cluster is cancelled by the jobs' reconciler."""
    from apps.jobs.services import job_cancel_locked

    if replica.job_id is None:
        return
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=replica.job_id)
        if job.state in TERMINAL or job.cancel_requested:
            return
        if job_cancel_locked(job=job, reason="replica stopped by its deployment"):
            transaction.on_commit(lambda: _cancel_soon(job.pk))


def _cancel_soon(job_id) -> None:
    try:
        request_cancel(job_id)
    except Exception as exc:  # the broker down: the jobs' reconciler re-issues the cancel
        logger.warning("cancel of job %s left to the reconciler: %s", job_id, exc)


# -- the dispatcher's part ----------------------------------------------------------------------


def serve_prepare(*, job: Job) -> None:
    """At dispatch: a serve job runs only for a live replica of a deployment (a user cannot
    make one through the jobs API)."""
    from apps.compute.backends.base import SubmitRejected

    live = Replica.objects.filter(job=job).exclude(state=ReplicaState.STOPPED).exists()
    if not live:
        raise SubmitRejected("a serve job runs only as a deployment's replica")


def serve_environment(*, job: Job) -> dict[str, str]:
    """What a replica's job gets besides a job's usual environment: the engine key. The
    dispatcher passes it as one of the submission's secrets (never its environment): on
    Kubernetes a Secret read through secretKeyRef, never a plain value in the manifest."""
    replica = Replica.objects.filter(job=job).only("deployment_id").first()
    if replica is None:
        return {}
    return {"LLAMA_API_KEY": engine_key(deployment_id=replica.deployment_id)}


# -- talking to a replica -----------------------------------------------------------------------


def read_endpoint(*, job: Job) -> tuple[str, int] | None:
    """(host, port) the replica's job wrote to serve.json; None if absent or malformed. The
    job's user wrote the file: it is read through the one reader of tenants' trees (from the
    tenant's root, no link followed on the way), must be a small regular file, and is taken
    only if its host is the one the cluster reports for the replica (serve_host: the node's
    loopback on Slurm, the pod's IP on Kubernetes), with a port number."""
    path = Path(paths.job_dir(job)) / INFO_FILE
    try:
        raw = tree.read_small(tenant_root(job.project.tenant), path, limit=INFO_MAX_BYTES)
        data = json.loads(raw or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    host, port = data.get("host"), data.get("port")
    if not isinstance(port, int) or not 1024 <= port <= 65535:
        return None
    if not isinstance(host, str) or not host or host != _serve_host(job):
        return None
    return host, port


def _serve_host(job: Job) -> str | None:
    from apps.compute.backends import for_cluster
    from apps.compute.backends.base import ClusterUnavailable

    attempt = job.attempts.order_by("-number").first()
    if attempt is None or job.cluster is None:
        return None
    try:
        return for_cluster(job.cluster).serve_host(attempt.tag)
    except ClusterUnavailable:
        return None


def log_tail(*, job: Job, lines: int = 4, max_bytes: int = 2048) -> str:
    """The last lines of a job's stderr (the engine's complaints), for a replica's reason. The
    job's user wrote the file: read through the one reader of tenants' trees (from the
    tenant's root, no link followed on the way), a regular file only."""
    attempt = job.attempts.order_by("-number").first()
    if attempt is None or not attempt.stderr_path:
        return ""
    try:
        raw = tree.read_tail(
            tenant_root(job.project.tenant), attempt.stderr_path, max_bytes=max_bytes
        )
    except OSError:
        return ""
    text = raw.decode("utf-8", "replace")
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept)


def _url(replica: Replica, path: str) -> str:
    return f"http://{replica.host}:{replica.port}{path}"


def _headers(replica: Replica) -> dict:
    return {"Authorization": f"Bearer {engine_key(deployment_id=replica.deployment_id)}"}


def health_ok(*, replica: Replica, timeout: float = 2.0) -> bool:
    try:
        response = httpx.get(_url(replica, "/health"), timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def completion_ok(*, replica: Replica, timeout: float = 10.0) -> bool:
    """A one-token completion: the model is loaded and the engine key is the deployment's."""
    try:
        response = httpx.post(
            _url(replica, "/v1/completions"),
            json={"prompt": "Hello", "max_tokens": 1, "temperature": 0},
            headers=_headers(replica),
            timeout=timeout,
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


METRICS = {
    "llamacpp:requests_processing": "processing",
    "llamacpp:requests_deferred": "deferred",
    "llamacpp:n_busy_slots_per_decode": "busy_slots_per_decode",
}


def parse_metrics(text: str) -> dict[str, float]:
    """The engine's Prometheus text -> the figures autoscaling reads."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition(" ")
        key = METRICS.get(name.split("{", 1)[0])
        if key:
            try:
                found[key] = float(value.split()[0])
            except (ValueError, IndexError):
                continue
    return found


def read_metrics(*, replica: Replica, timeout: float = 2.0) -> dict[str, float] | None:
    try:
        response = httpx.get(_url(replica, "/metrics"), headers=_headers(replica), timeout=timeout)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse_metrics(response.text)


def job_ended(job: Job | None) -> bool:
    return job is None or job.state in TERMINAL
