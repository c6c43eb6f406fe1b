"""/ws/jobs/{id}/: backlog then live batches over the real Redis channel layer; refused for
another tenant's job and for anonymous callers at the handshake."""

import pytest
from channels.testing import WebsocketCommunicator

from apps.jobs.models import JobAttempt
from apps.logs.shipper import ship_pass
from apps.tenancy.models import Role
from config.asgi import application
from tests.factories import make_job
from tests.logs.conftest import count

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def _bearer(token: str):
    return (b"authorization", f"Bearer {token}".encode())


@pytest.fixture
def running(acme, cluster, tmp_path):
    job = make_job(
        project=acme.project, user=acme.users[Role.MEMBER], state="RUNNING", cluster=cluster
    )
    attempt = JobAttempt.objects.create(
        job=job,
        number=1,
        state="RUNNING",
        nodes=["n1"],
        stdout_path=str(tmp_path / "out"),
        stderr_path=str(tmp_path / "err"),
    )
    return job, attempt


async def test_backlog_then_live_lines_in_batches(es, acme, running):
    from asgiref.sync import sync_to_async

    job, attempt = running
    with open(attempt.stdout_path, "w") as handle:
        handle.write("".join(f"old {i}\n" for i in range(5)))
    await sync_to_async(ship_pass)()
    await sync_to_async(count)(job=job)  # refresh: the backlog is searchable
    ws = WebsocketCommunicator(
        application,
        f"/ws/jobs/{job.pk}/?tail=3",
        headers=[ORIGIN, _bearer(acme.tokens[Role.VIEWER])],
    )
    connected, _ = await ws.connect()
    assert connected
    backlog = await ws.receive_json_from(timeout=5)
    assert backlog["type"] == "backlog" and backlog["state"] == "RUNNING"
    assert [line["message"] for line in backlog["lines"]] == ["old 2", "old 3", "old 4"]
    with open(attempt.stdout_path, "a") as handle:
        handle.write("".join(f"new {i}\n" for i in range(1200)))
    await sync_to_async(ship_pass)()
    received = []
    while len(received) < 1200:
        message = await ws.receive_json_from(timeout=10)
        assert message["type"] == "lines" and len(message["lines"]) <= 500
        received += [line["message"] for line in message["lines"]]
    assert received == [f"new {i}" for i in range(1200)]
    await ws.disconnect()


async def test_another_tenants_job_is_refused_at_the_handshake(es, globex, running):
    job, _ = running
    ws = WebsocketCommunicator(
        application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN, _bearer(globex.tokens[Role.OWNER])]
    )
    connected, code = await ws.connect()
    assert not connected and code == 4404
    ws = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN])
    connected, code = await ws.connect()
    assert not connected and code == 4401
    ws = WebsocketCommunicator(
        application, "/ws/jobs/not-a-uuid/", headers=[ORIGIN, _bearer(globex.tokens[Role.OWNER])]
    )
    connected, code = await ws.connect()
    assert not connected and code == 4404
