"""`torus deploy`, `torus deployments ls|show|events|logs|scale|rm` and `torus chat` (streamed
through the gateway) against the whole ASGI application, real Slurm and the real engine."""

import json

import pytest

from apps.serving.models import Deployment
from apps.tenancy.models import Role
from tests.sdk.cli import run_cli
from tests.serving.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env(asgi_server, acme):
    return {"TORUS_URL": asgi_server.url, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}


def test_deploy_list_chat_logs_scale_and_remove(env, acme, gguf_version, serving_loop):
    done = run_cli(
        "deploy", "tiny@production", "--replicas", "1", "--slots", "2", "--context", "512",
        "--wait", "--timeout", "150", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "[tiny] READY" in done.stderr, done.stderr
    assert "tiny@production" in done.stdout and "1/1 (1-1)" in done.stdout, done.stdout
    deployment = Deployment.objects.get(name="tiny")
    # again, the same alias: nothing changes (a README run twice); another reference: refused
    again = run_cli("deploy", "tiny@production", "--wait", "--timeout", "60", env=env)
    assert again.returncode == 0 and "[tiny] deployed already, unchanged" in again.stderr
    assert Deployment.objects.get().pk == deployment.pk
    pinned = run_cli("deploy", "tiny:1", env=env)
    assert pinned.returncode == 1 and "named 'tiny' exists" in pinned.stderr, pinned.stderr

    listed = json.loads(run_cli("--json", "deployments", "ls", env=env).stdout)
    assert [(d["name"], d["state"]) for d in listed] == [("tiny", "READY")]
    table = run_cli("deployments", "ls", "--project", acme.project.slug, env=env).stdout
    assert table.splitlines()[0].split()[:3] == ["NAME", "STATE", "REF"]

    chat = run_cli("chat", "tiny", "Hello there", "--max-tokens", "8", env=env)
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.endswith("\n") and chat.stdout.strip(), chat.stdout
    as_json = run_cli("--json", "chat", "tiny", "Hi", "--max-tokens", "4", env=env).stdout
    as_json = json.loads(as_json)
    assert as_json["deployment"] == str(deployment.pk) and as_json["content"]

    logs = run_cli("deployments", "logs", "tiny", env=env)
    assert logs.returncode == 0 and "llama" in logs.stdout.lower(), logs.stdout[-2000:]
    events = run_cli("deployments", "events", "tiny", env=env).stdout
    assert "created" in events and "replica_ready" in events
    shown = run_cli("deployments", "show", "tiny", env=env).stdout
    assert "READY" in shown and "JOB_STATE" in shown

    scaled = run_cli("deployments", "scale", "tiny", "2", "--max", "2", env=env)
    assert scaled.returncode == 0, scaled.stderr
    wait_for(
        deployment.pk,
        condition=lambda d: d.replicas.filter(state="READY").count() == 2,
        timeout=150,
        what="two replicas",
    )

    missing = run_cli("chat", "nope", "Hi", env=env)
    assert missing.returncode == 1 and "no deployment named 'nope'" in missing.stderr
    bad = run_cli("deploy", "tiny:1", "--name", "Bad Name", env=env)
    assert bad.returncode == 1 and "name" in bad.stderr

    # it ran replicas: removing is refused with the reason, archiving (by name) stops it
    removed = run_cli("deployments", "rm", "tiny", env=env)
    assert removed.returncode == 1 and "archive it instead" in removed.stderr, removed.stderr
    archived = run_cli("deployments", "archive", "tiny", "--confirm", "tiny", env=env)
    assert archived.returncode == 0 and "archived deployment tiny" in archived.stdout
    deployment = Deployment.objects.get()
    assert deployment.archived_at is not None and deployment.state == "STOPPED"
