"""bench/serving.py's engine: the tiny model, llama-server, the deployment and its replica."""

import os
import subprocess
import sys
from pathlib import Path

from _common import ROOT, ensure_tenant
from _common import log as _log

from scripts.devstack import Proc, free_port, wait_answering

CONCURRENCY = (1, 4, 16)
PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over",
    "In the beginning the platform",
    "Tell me about the weather in",
    "A list of things to do today:",
]


def log(msg: str) -> None:
    _log("serving", msg)


def make_model(logdir: Path) -> Path:
    from django.conf import settings

    out = logdir / "tiny.gguf"
    subprocess.run(  # noqa: S603
        [sys.executable, str(ROOT / "examples/serving/make_tiny_llama.py"), str(out)],
        check=True,
        cwd=ROOT,
        capture_output=True,
        env={**os.environ, "TORUS_LLAMA_VOCAB": settings.TORUS_LLAMA_VOCAB},
    )
    return out


def start_engine(model: Path, logdir: Path, *, api_key: str, slots: int) -> tuple[Proc, int]:
    from django.conf import settings

    port = free_port()
    argv = [settings.TORUS_LLAMA_SERVER, "-m", str(model), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "-np", str(slots), "-c", str(slots * 1024), "-t", "1"]
    argv += ["--metrics", "--alias", "tiny:1"]
    proc = Proc(f"engine-{port}", argv, logdir, env={**os.environ, "LLAMA_ARG_API_KEY": api_key})
    wait_answering(f"http://127.0.0.1:{port}/health", proc=proc, timeout=60)
    return proc, port


def fixture(*, slots: int, max_tokens: int):
    """The bench tenant's deployment `bench` (previous runs' rows removed) of a model row."""
    from apps.registry.models import ModelVersion, RegisteredModel
    from apps.serving.models import Deployment, DeploymentState

    world = ensure_tenant(
        slug="bench-serving",
        project_slug="serve",
        owner="bench-serving-owner",
        token_name="bench-serving",
    )
    Deployment.objects.filter(project=world["project"]).delete()
    model, _ = RegisteredModel.objects.get_or_create(
        tenant=world["tenant"],
        project=world["project"],
        name="tiny",
        defaults={"created_by": world["user"]},
    )
    version, _ = ModelVersion.objects.get_or_create(
        model=model, number=1, defaults={"framework": "gguf", "state": "ready"}
    )
    deployment = Deployment.objects.create(
        tenant=world["tenant"],
        project=world["project"],
        name="bench",
        model=model,
        ref="tiny:1",
        version=version,
        created_by=world["user"],
        state=DeploymentState.READY,
        slots=slots,
        max_tokens=max_tokens,
    )
    return world, deployment


def register_replica(deployment, port: int):
    from apps.serving import routes
    from apps.serving.models import Replica, ReplicaState

    replica = Replica.objects.create(
        deployment=deployment,
        version=deployment.version,
        state=ReplicaState.READY,
        host="127.0.0.1",
        port=port,
    )
    routes.publish(deployment_id=deployment.pk)
    return replica
