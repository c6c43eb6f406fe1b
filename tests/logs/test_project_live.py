"""/ws/tenants/{id}/jobs/: a jobs list's live states, over the real Redis channel layer. Every
committed state change of the tenant's jobs arrives (one project's with ?project=), batched per
commit; another tenant's list hears nothing and is refused at the handshake."""

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import Job
from apps.jobs.transitions import (
    TRANSITION_FIELDS,
    events_record,
    job_transition,
    transition_in_memory,
)
from apps.logs.consumers import CLOSE_NOT_FOUND
from apps.tenancy.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from apps.tenancy.models import Membership, Role
from config.asgi import application
from tests.conftest import refused_with
from tests.factories import ProjectFactory, make_job

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def _bearer(token: str):
    return (b"authorization", f"Bearer {token}".encode())


async def _open(tenant_id, token: str | None, query: str = "") -> WebsocketCommunicator:
    headers = [ORIGIN, _bearer(token)] if token else [ORIGIN]
    return WebsocketCommunicator(
        application, f"/ws/tenants/{tenant_id}/jobs/{query}", headers=headers
    )


async def _subscribed(tenant_id, token: str, query: str = "") -> WebsocketCommunicator:
    ws = await _open(tenant_id, token, query)
    connected, code = await ws.connect(timeout=5)
    assert connected, code
    first = await ws.receive_json_from(timeout=5)
    assert first["type"] == "subscribed" and first["tenant"] == str(tenant_id)
    return ws


async def _refused(tenant_id, token: str | None, query: str = "") -> int | None:
    return await refused_with(await _open(tenant_id, token, query))


@sync_to_async
def _move(job_id, to: str, reason: str = "") -> None:
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        job_transition(job=job, to=to, reason=reason)


@sync_to_async
def _move_together(job_ids, to: str) -> None:
    """Several jobs in one commit, as an admission pass moves them."""
    with transaction.atomic():
        jobs = list(Job.objects.select_for_update().filter(pk__in=job_ids).order_by("name"))
        events = [transition_in_memory(job=job, to=to, reason="admitted") for job in jobs]
        events_record(events=events)
        Job.objects.bulk_update(jobs, [f for f in TRANSITION_FIELDS if f != "updated_at"])


@pytest.fixture
def jobs(acme, globex, cluster):
    other = ProjectFactory(tenant=acme.tenant, slug="speech")
    member = acme.users[Role.MEMBER]
    return {
        "a": make_job(project=acme.project, user=member, name="a", cluster=cluster),
        "b": make_job(project=acme.project, user=member, name="b", cluster=cluster),
        "speech": make_job(project=other, user=member, name="speech", cluster=cluster),
        "theirs": make_job(
            project=globex.project, user=globex.users[Role.MEMBER], name="t", cluster=cluster
        ),
    }


async def test_every_state_change_of_the_tenant_reaches_its_list(acme, globex, jobs):
    ours = await _subscribed(acme.tenant.pk, acme.tokens[Role.VIEWER])
    theirs = await _subscribed(globex.tenant.pk, globex.tokens[Role.VIEWER])
    await _move(jobs["a"].pk, "QUEUED", "admitted")
    message = await ours.receive_json_from(timeout=5)
    assert message["type"] == "states"
    [change] = message["changes"]
    assert change["job"] == str(jobs["a"].pk) and change["project"] == str(acme.project.pk)
    assert (change["from"], change["state"], change["reason"]) == ("PENDING", "QUEUED", "admitted")
    assert change["at"] and change["attempt"] is None
    await _move(jobs["speech"].pk, "CANCELLED")  # another project of the same tenant
    message = await ours.receive_json_from(timeout=5)
    assert [c["job"] for c in message["changes"]] == [str(jobs["speech"].pk)]
    assert await theirs.receive_nothing(timeout=0.5)  # nothing of acme's reaches globex
    await _move(jobs["theirs"].pk, "QUEUED")
    message = await theirs.receive_json_from(timeout=5)
    assert [c["job"] for c in message["changes"]] == [str(jobs["theirs"].pk)]
    assert await ours.receive_nothing(timeout=0.5)
    await ours.disconnect()
    await theirs.disconnect()


async def test_a_submitted_job_appears_in_the_list_at_once(acme, jobs):
    ws = await _subscribed(acme.tenant.pk, acme.tokens[Role.VIEWER])
    body = {"project": str(acme.project.pk), "name": "new", "command": ["true"]}
    response = await sync_to_async(acme.client(Role.MEMBER).post)(
        reverse("job-list"), body, format="json"
    )
    assert response.status_code == 201, response.content
    message = await ws.receive_json_from(timeout=5)
    # its first event, and its admission when the tenant has no quota (the same commit)
    first, *rest = message["changes"]
    assert first["job"] == response.json()["id"] and first["project"] == str(acme.project.pk)
    assert (first["from"], first["state"], first["reason"]) == ("", "PENDING", "submitted")
    assert [(c["job"], c["from"], c["state"]) for c in rest] in (
        [],
        [(first["job"], "PENDING", "QUEUED")],
    )
    await ws.disconnect()


async def test_one_commit_is_one_message(acme, jobs):
    ws = await _subscribed(acme.tenant.pk, acme.tokens[Role.MEMBER])
    await _move_together([jobs["a"].pk, jobs["b"].pk, jobs["speech"].pk], "QUEUED")
    message = await ws.receive_json_from(timeout=5)
    assert sorted(c["job"] for c in message["changes"]) == sorted(
        str(jobs[name].pk) for name in ("a", "b", "speech")
    )
    assert {c["state"] for c in message["changes"]} == {"QUEUED"}
    assert await ws.receive_nothing(timeout=0.5)
    await ws.disconnect()


async def test_a_project_filter_sends_only_that_projects_changes(acme, jobs):
    speech = jobs["speech"].project_id
    ws = await _subscribed(acme.tenant.pk, acme.tokens[Role.VIEWER], f"?project={speech}")
    await _move(jobs["a"].pk, "QUEUED")
    assert await ws.receive_nothing(timeout=0.5)
    await _move_together([jobs["b"].pk, jobs["speech"].pk], "QUEUED")
    message = await ws.receive_json_from(timeout=5)
    assert [c["job"] for c in message["changes"]] == [str(jobs["speech"].pk)]
    await ws.disconnect()


async def test_the_handshake_refuses_what_the_api_would(acme, globex, jobs):
    token = acme.tokens[Role.VIEWER]
    assert await _refused(acme.tenant.pk, None) == CLOSE_UNAUTHENTICATED
    assert await _refused(globex.tenant.pk, token) == CLOSE_NOT_FOUND  # another tenant
    assert await _refused("not-a-uuid", token) == CLOSE_NOT_FOUND
    assert await _refused(uuid.uuid4(), token) == CLOSE_NOT_FOUND
    # a project of another tenant, or none, is not found either
    assert await _refused(acme.tenant.pk, token, f"?project={globex.project.pk}") == 4404
    assert await _refused(acme.tenant.pk, token, "?project=speech") == CLOSE_NOT_FOUND


async def test_a_removed_member_is_disconnected(acme, jobs, settings):
    settings.TORUS_LIVE_ACCESS_RECHECK_SECONDS = 0.2  # the backstop re-check finds it
    ws = await _subscribed(acme.tenant.pk, acme.tokens[Role.VIEWER])
    await sync_to_async(
        Membership.objects.filter(tenant=acme.tenant, user=acme.users[Role.VIEWER]).delete
    )()
    deadline = asyncio.get_running_loop().time() + 5
    code = None
    while asyncio.get_running_loop().time() < deadline and code is None:
        if await ws.receive_nothing(timeout=0.1):
            continue
        output = await ws.receive_output()
        if output["type"] == "websocket.close":
            code = output.get("code")
    assert code in (CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED)


def _zrange_calls() -> int:
    """ZRANGE calls the Redis server has served: channels_redis reads a group's members with
    one before every send to it."""
    import redis
    from django.conf import settings

    stats = redis.Redis.from_url(settings.REDIS_URL).info("commandstats")
    return stats.get("cmdstat_zrange", {}).get("calls", 0)


async def test_a_publish_sends_only_to_the_groups_someone_is_in(acme, jobs):
    """Fifty jobs move at once (a dispatch pass): the tenant's list, watched, gets them in one
    message; the fifty job groups nobody watches cost no send of their own."""
    from apps.jobs.models import JobEvent
    from apps.logs.live import publish_states

    ws = await _subscribed(acme.tenant.pk, acme.tokens[Role.VIEWER])
    moved = [Job(id=uuid.uuid4(), tenant=acme.tenant, project=acme.project) for _ in range(50)]
    events = [
        JobEvent(job=job, from_state="QUEUED", to_state="SUBMITTED", created_at=timezone.now())
        for job in moved
    ]
    before = await sync_to_async(_zrange_calls)()
    await sync_to_async(publish_states)(events=events)
    message = await ws.receive_json_from(timeout=5)
    assert [c["job"] for c in message["changes"]] == [str(job.pk) for job in moved]
    # the tenant's group's send (the receiving consumer's scripts may add one or two): not 51
    assert await sync_to_async(_zrange_calls)() - before < 5
    await ws.disconnect()
