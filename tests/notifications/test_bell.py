"""The UI's bell: a person's subscribed events, whatever the channel, come live on
/ws/notifications/ over the real Redis channel layer and are listed by the inbox, each event
once; an in-app subscription takes no address and sends nothing; another person hears nothing."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.urls import reverse

from apps.jobs.models import Job
from apps.jobs.transitions import job_transition
from apps.notifications.models import Notification
from apps.notifications.tasks import deliver
from apps.tenancy.consumers import CLOSE_UNAUTHENTICATED
from apps.tenancy.models import Role
from config.asgi import application
from tests.conftest import refused_with
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def _socket(token: str | None) -> WebsocketCommunicator:
    headers = [ORIGIN] + ([(b"authorization", f"Bearer {token}".encode())] if token else [])
    return WebsocketCommunicator(application, "/ws/notifications/", headers=headers)


async def _subscribed(token: str) -> WebsocketCommunicator:
    ws = _socket(token)
    connected, code = await ws.connect(timeout=5)
    assert connected, code
    assert (await ws.receive_json_from(timeout=5))["type"] == "subscribed"
    return ws


@sync_to_async
def _fail(job_id) -> None:
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        job_transition(job=job, to="FAILED", reason="exit code 3")


async def test_subscribed_events_ring_the_bell_live_and_stay_in_the_inbox(acme, cluster):
    member = acme.client(Role.MEMBER)
    url = reverse("subscription-list")
    bad = await sync_to_async(member.post)(
        url, {"events": ["failed"], "channel": "inapp", "address": "x@example.org"}, format="json"
    )
    assert bad.status_code == 400 and "address" in bad.json()["error"]["fields"]
    for body in (
        {"events": ["failed"], "channel": "inapp"},
        {"events": ["failed", "succeeded"], "channel": "email", "address": "m@example.org"},
    ):
        made = await sync_to_async(member.post)(url, body, format="json")
        assert made.status_code == 201, made.content
    job = await sync_to_async(make_job)(
        project=acme.project, user=acme.users[Role.MEMBER], state="RUNNING", cluster=cluster,
        name="train",
    )  # fmt: skip
    mine = await _subscribed(acme.tokens[Role.MEMBER])
    others = await _subscribed(acme.tokens[Role.ADMIN])
    assert await refused_with(_socket(None)) == CLOSE_UNAUTHENTICATED

    await _fail(job.pk)
    message = await mine.receive_json_from(timeout=10)
    assert message["type"] == "items"
    [item] = message["items"]  # two subscriptions matched: one item on the bell
    assert (item["event"], item["name"], item["reason"]) == ("failed", "train", "exit code 3")
    assert item["tenant"] == str(acme.tenant.pk) and item["job"] == str(job.pk)
    assert await others.receive_nothing(timeout=1)
    await mine.disconnect()
    await others.disconnect()

    inbox = await sync_to_async(member.get)(reverse("subscription-inbox"))
    assert [(i["event"], i["name"]) for i in inbox.json()["items"]] == [("failed", "train")]
    admin_inbox = await sync_to_async(acme.client(Role.ADMIN).get)(reverse("subscription-inbox"))
    assert admin_inbox.json()["items"] == []
    # the in-app message is delivered by the bell itself: nothing to send, it is SENT
    inapp = await sync_to_async(Notification.objects.get)(subscription__channel="inapp")
    assert await sync_to_async(deliver)(str(inapp.pk)) == "SENT"
