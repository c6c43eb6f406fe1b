"""Fixtures for model deployments on the real Slurm cluster and the real engine (llama.cpp's
llama-server, installed by `make engines`): a tiny random-weight Llama GGUF with the real
tokenizer (examples/serving/make_tiny_llama.py), registered as a model version of the test
tenant; deployments made through the API; the deployments' reconciler in a background loop
beside the jobs' control loop, as Celery beat runs both in production."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from apps.registry.aliases import alias_set
from apps.registry.models import RegisteredModel
from apps.registry.uploads import version_create_with_files
from apps.registry.versions import model_create
from apps.serving.models import Deployment, DeploymentEvent
from apps.serving.reconcile import reconcile_all
from apps.tenancy.access import actor_for_user
from apps.tenancy.models import Role
from tests.conftest import background_loop
from tests.jobs.conftest import control_loop, slurm_cluster  # noqa: F401  (fixtures)
from tests.registry.conftest import globex_area, models_area  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]
MAKE_MODEL = REPO / "examples" / "serving" / "make_tiny_llama.py"


def engine_installed() -> str:
    server = settings.TORUS_LLAMA_SERVER
    assert os.access(server, os.X_OK), f"{server} missing: run `make engines` (make test does)"
    return server


def make_tiny_model(out: Path, *args: str) -> Path:
    """examples/serving/make_tiny_llama.py OUT [args]: a random-weight Llama GGUF with the
    real tokenizer (default: 4 layers, hidden 256, 4/2 heads; deterministic)."""
    env = {**os.environ, "TORUS_LLAMA_VOCAB": settings.TORUS_LLAMA_VOCAB}
    subprocess.run([sys.executable, str(MAKE_MODEL), str(out), *args], env=env, check=True)
    return out


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    """The tiny GQA model, made once per run."""
    return make_tiny_model(tmp_path_factory.mktemp("serving") / "tiny-llama.gguf")


def register_gguf(world, path: Path, *, name: str = "tiny", alias: str | None = "production"):
    """A new ready version of model `name` in the world's project (made if missing), with the
    GGUF as its one file, made by the project's member; `alias` pointed at it."""
    actor = actor_for_user(user=world.users[Role.MEMBER])
    model = RegisteredModel.objects.filter(project=world.project, name=name).first()
    if model is None:
        model = model_create(actor=actor, project=world.project, name=name)
    with path.open("rb") as handle:
        version = version_create_with_files(
            actor=actor, model=model, files=[(path.name, handle)], framework="gguf"
        )
    if alias:
        alias_set(actor=actor, model=model, name=alias, version=version)
    return version


@pytest.fixture
def serving_area(acme, models_area):  # noqa: F811
    """The project's tree as the root worker makes it (its groups from the directory): the
    replicas' jobs, running as the member, read the versions' sealed files through the
    project's group."""
    from apps.datasets.tasks import project_storage_ensure

    project_storage_ensure(str(acme.project.pk))
    return models_area


@pytest.fixture
def gguf_version(acme, serving_area, tiny_gguf):
    return register_gguf(acme, tiny_gguf)


@pytest.fixture
def serving_loop(control_loop):  # noqa: F811
    """The deployments' reconciler every 0.5 s beside the jobs' control loop."""
    engine_installed()
    with background_loop(reconcile_all, interval=0.5):
        yield


def deploy(client, project, **body) -> dict:
    body = {"project": str(project.pk), "name": "tiny", "model": "tiny@production", **body}
    response = client.post(reverse("deployment-list"), body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def wait_for(deployment_id, *, condition, timeout: float = 120, what: str = "") -> Deployment:
    """Poll the deployment until condition(deployment) holds; on timeout say where it stood."""
    deadline = time.monotonic() + timeout
    while True:
        deployment = Deployment.objects.get(pk=deployment_id)
        if condition(deployment):
            return deployment
        if time.monotonic() > deadline:
            events = list(
                DeploymentEvent.objects.filter(deployment_id=deployment_id)
                .order_by("created_at")
                .values_list("kind", "message")
            )
            replicas = list(deployment.replicas.values_list("state", "state_reason", "job__state"))
            raise AssertionError(
                f"{what or 'condition'} not reached: {deployment.state}"
                f" ({deployment.state_reason}); replicas {replicas}; events {events}"
            )
        time.sleep(0.25)


def wait_ready(deployment_id, *, replicas: int | None = None, timeout: float = 120):
    def ready(d: Deployment) -> bool:
        count = d.replicas.filter(state="READY").count()
        return d.state == "READY" and (replicas is None or count == replicas)

    return wait_for(deployment_id, condition=ready, timeout=timeout, what="READY")


def event_kinds(deployment_id) -> list[str]:
    return list(
        DeploymentEvent.objects.filter(deployment_id=deployment_id)
        .order_by("created_at")
        .values_list("kind", flat=True)
    )


def flush_records(deployment_id, *, at_least: int, timeout: float = 15) -> None:
    """Write the gateway's queued records until the deployment has `at_least` of them: a
    request's record is queued as its response ends, which can be just after the client
    has read it."""
    from apps.serving import records
    from apps.serving.models import ServingRequest

    deadline = time.monotonic() + timeout
    while True:
        records.flush()
        count = ServingRequest.objects.filter(deployment_id=deployment_id).count()
        if count >= at_least:
            return
        assert time.monotonic() < deadline, f"{count} of {at_least} records written"
        time.sleep(0.1)


def wait_dead(pid: int, *, timeout: float = 10) -> None:
    """Until the process has exited (gone, or a zombie whose sockets are closed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} still alive {timeout} s after SIGKILL")


def engine_pid(port: int) -> int:
    """The llama-server listening on `port` (its argv carries the port: SERVE_SCRIPT)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"llama-server") and str(port).encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no llama-server on port {port}")
