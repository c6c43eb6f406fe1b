"""/ws/jobs/{id}/: backlog then live batches over the real Redis channel layer; refused for
another tenant's job and for anonymous callers at the handshake."""

import time

import pytest
from channels.testing import WebsocketCommunicator

from apps.jobs.models import JobAttempt
from apps.logs.shipper import ship_pass
from apps.tenancy.models import Role
from config.asgi import application
from tests.conftest import refused_with
from tests.factories import make_job
from tests.logs.conftest import count

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def _bearer(token: str):
    return (b"authorization", f"Bearer {token}".encode())


@pytest.fixture
def running(acme, cluster, logs_dir):
    job = make_job(
        project=acme.project, user=acme.users[Role.MEMBER], state="RUNNING", cluster=cluster
    )
    attempt = JobAttempt.objects.create(
        job=job,
        number=1,
        state="RUNNING",
        nodes=["n1"],
        stdout_path=str(logs_dir / "out"),
        stderr_path=str(logs_dir / "err"),
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
    assert await refused_with(ws) == 4404
    ws = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN])
    assert await refused_with(ws) == 4401
    ws = WebsocketCommunicator(
        application, "/ws/jobs/not-a-uuid/", headers=[ORIGIN, _bearer(globex.tokens[Role.OWNER])]
    )
    assert await refused_with(ws) == 4404


async def _until(ws, kind: str, timeout: float = 10) -> dict:
    while True:
        message = await ws.receive_json_from(timeout=timeout)
        if message["type"] == kind:
            return message


def _end_attempt(job_id, attempt_id) -> None:
    from django.db import transaction

    from apps.jobs.models import Job
    from apps.jobs.transitions import job_transition

    with transaction.atomic():
        JobAttempt.objects.filter(pk=attempt_id).update(state="SUCCEEDED")
        job = Job.objects.select_for_update().get(pk=job_id)
        job_transition(job=job, to="SUCCEEDED", reason="exit code 0")


async def test_state_changes_and_stream_ends_are_pushed(es, acme, running):
    from asgiref.sync import sync_to_async

    job, attempt = running
    ws = WebsocketCommunicator(
        application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN, _bearer(acme.tokens[Role.VIEWER])]
    )
    assert (await ws.connect())[0]
    backlog = await ws.receive_json_from(timeout=5)
    assert backlog["streams"] == {"attempt": 1, "stdout": False, "stderr": False}
    with open(attempt.stdout_path, "w") as handle:
        handle.write("last words\n")
    await sync_to_async(_end_attempt)(job.pk, attempt.pk)
    state = await _until(ws, "state")
    assert state["state"] == "SUCCEEDED" and state["from"] == "RUNNING"
    assert state["reason"] == "exit code 0" and state["at"]
    await sync_to_async(ship_pass)()
    lines = await _until(ws, "lines")
    assert [line["message"] for line in lines["lines"]] == ["last words"]
    ends = {(m["attempt"], m["stream"]) for m in [await _until(ws, "stream_end") for _ in "12"]}
    assert ends == {(1, "stdout"), (1, "stderr")}
    shipped = await sync_to_async(JobAttempt.objects.get)(pk=attempt.pk)
    assert shipped.logs_shipped  # the shipper's query no longer returns it
    await ws.disconnect()
    # a viewer arriving afterwards learns from the backlog that nothing more will come
    ws = WebsocketCommunicator(
        application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN, _bearer(acme.tokens[Role.VIEWER])]
    )
    assert (await ws.connect())[0]
    backlog = await ws.receive_json_from(timeout=5)
    assert backlog["state"] == "SUCCEEDED"
    assert backlog["streams"] == {"attempt": 1, "stdout": True, "stderr": True}
    assert [line["message"] for line in backlog["lines"]] == ["last words"]
    await ws.disconnect()


async def test_a_flood_is_bounded_per_viewer_and_the_rest_is_counted(es, acme, running, settings):
    from asgiref.sync import sync_to_async

    settings.TORUS_LIVE_MAX_LINES_PER_SECOND = 100
    job, attempt = running
    ws = WebsocketCommunicator(
        application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN, _bearer(acme.tokens[Role.VIEWER])]
    )
    assert (await ws.connect())[0]
    await ws.receive_json_from(timeout=5)
    with open(attempt.stdout_path, "w") as handle:
        handle.write("".join(f"flood {i}\n" for i in range(1500)))
    started = time.monotonic()
    await sync_to_async(ship_pass)()
    shown, skipped, first_skipped = [], 0, None
    while len(shown) + skipped < 1500:
        message = await ws.receive_json_from(timeout=10)
        if message["type"] == "lines":
            shown += [line["message"] for line in message["lines"]]
        elif message["type"] == "skipped":
            skipped += message["count"]
            first_skipped = first_skipped or message["first"]
    numbers = [int(message.split()[1]) for message in shown]
    assert numbers[:100] == list(range(100))  # the first second's worth, in order
    assert numbers == sorted(set(numbers))  # later batches may show a refill's worth, in order
    refill = 100 * (time.monotonic() - started)  # the budget refills while it runs
    assert 100 <= len(shown) <= 100 + refill + 1 and len(shown) + skipped == 1500
    assert first_skipped["offset"] == len("".join(f"flood {i}\n" for i in range(100)))
    assert await sync_to_async(count)(job=job) == 1500  # only the live view was bounded
    await ws.disconnect()


async def test_a_bad_tail_parameter_falls_back_to_the_default(es, acme, running):
    job, _ = running
    ws = WebsocketCommunicator(
        application,
        f"/ws/jobs/{job.pk}/?tail=lots",
        headers=[ORIGIN, _bearer(acme.tokens[Role.VIEWER])],
    )
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from(timeout=5))["type"] == "backlog"
    await ws.disconnect()


async def test_a_socket_that_fails_after_accept_leaves_its_group_and_stops_rechecking(
    es, acme, running, monkeypatch
):
    """A send to a client that has already gone raises in the handler, skipping `disconnect`:
    the socket must still leave its job's group and stop its access recheck (they had piled
    up under load, polling the database for ever)."""
    import asyncio

    from channels.layers import get_channel_layer

    from apps.logs import consumers
    from apps.logs.live import job_group

    async def gone(*_args):
        raise ConnectionResetError("the client has gone")

    monkeypatch.setattr(consumers, "_backlog", gone)
    job, _ = running
    ws = WebsocketCommunicator(
        application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN, _bearer(acme.tokens[Role.VIEWER])]
    )
    assert (await ws.connect())[0]  # accepted, then the backlog's send fails
    with pytest.raises(ConnectionResetError):
        await ws.wait(timeout=5)
    rechecks = [
        task
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "").endswith("_recheck_loop")
        and not task.done()
    ]
    assert rechecks == []
    layer = get_channel_layer()
    key = layer._group_key(job_group(job.pk))
    async with layer.connection(layer.consistent_hash(key)) as redis:
        assert await redis.zcard(key) == 0  # no dead channel left in the job's group


async def test_the_handshake_and_backlog_do_not_wait_for_the_sync_thread(es, acme, running):
    """Sync code outside a request context runs in one thread per process (asgiref's). A
    socket's queries run in pool threads instead (apps/core/db_threads.py): one slow call
    there (another socket's backlog under load) holds no viewer's handshake and backlog up."""
    import asyncio
    import threading

    from asgiref.sync import sync_to_async

    job, _ = running
    release = threading.Event()
    holding = asyncio.ensure_future(sync_to_async(release.wait, thread_sensitive=True)())
    try:
        ws = WebsocketCommunicator(
            application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN, _bearer(acme.tokens[Role.VIEWER])]
        )
        connected, _ = await ws.connect(timeout=10)
        assert connected
        backlog = await ws.receive_json_from(timeout=10)
        assert backlog["type"] == "backlog" and backlog["state"] == "RUNNING"
        assert not holding.done()  # the sync thread was held all along
    finally:
        release.set()
        await holding
    await ws.disconnect()
