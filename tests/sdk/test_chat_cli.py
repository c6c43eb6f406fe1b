"""`torus chat` on a deployment that cannot answer: the real gateway (the portal's ASGI app)
says at once that a FAILED deployment failed and why, and the CLI prints it; a request held
past the client's timeout while no replica is ready is reported as such, not as "cannot
reach Torus"."""

import time
from argparse import Namespace

import httpx
import pytest

from apps.registry.models import ModelVersion, RegisteredModel
from apps.serving.models import Deployment, DeploymentState
from apps.tenancy.models import Role
from tests.sdk.cli import run_cli
from torus import Client
from torus.deployments_cli import cmd_chat
from torus.errors import TorusError

REASON = "3 replicas failed in a row: llama-server: cannot open tiny.gguf (Permission denied)"


def deployment(world, *, state: str, reason: str = "") -> Deployment:
    owner = world.users[Role.OWNER]
    model = RegisteredModel.objects.create(
        tenant=world.tenant, project=world.project, name="tiny", created_by=owner
    )
    version = ModelVersion.objects.create(model=model, number=1, framework="gguf", state="ready")
    return Deployment.objects.create(
        tenant=world.tenant, project=world.project, name="tiny", model=model, ref="tiny@production",
        version=version, created_by=owner, state=state, state_reason=reason, replicas_desired=2,
    )  # fmt: skip


def test_chat_with_a_failed_deployment_says_it_failed_and_why(asgi_server, acme):
    made = deployment(acme, state=DeploymentState.FAILED, reason=REASON)
    token = acme.tokens[Role.MEMBER]

    # the gateway answers at once, OpenAI-style, with the reason (no hold until a timeout)
    started = time.monotonic()
    answer = httpx.post(
        f"{asgi_server.url}/serve/{made.pk}/v1/chat/completions",
        headers={"Authorization": f"Bearer {token}"},
        json={"messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert time.monotonic() - started < 10
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "deployment_failed"
    assert error["message"] == f"Deployment tiny failed: {REASON}"

    done = run_cli(
        "chat", "tiny", "Once upon a time", env={"TORUS_URL": asgi_server.url, "TORUS_TOKEN": token}
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == f"torus: Deployment tiny failed: {REASON}"


def test_chat_held_past_the_clients_timeout_says_no_replica_is_ready(asgi_server, acme, settings):
    settings.TORUS_SERVING_COLD_START_S = 4  # the gateway's hold (the client gives up first)
    deployment(acme, state=DeploymentState.STARTING, reason="waiting for resources")
    args = Namespace(deployment="tiny", project=None, prompt="hi", max_tokens=None, json=False)
    client = Client(url=asgi_server.url, token=acme.tokens[Role.MEMBER], timeout=1)
    with client, pytest.raises(TorusError) as raised:
        cmd_chat(client, args)
    assert str(raised.value) == (
        "deployment tiny: no replica ready (STARTING: waiting for resources)"
    )
    time.sleep(4)  # the held request ends (503) before the server stops
