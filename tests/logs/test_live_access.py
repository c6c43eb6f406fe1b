"""Access revoked is access ended: an open /ws/jobs/{id}/ closes within seconds when its token
is revoked or expires, its session logs out, or its membership is removed (4401: credentials no
longer valid, 4403: no longer allowed), over the real Redis channel layer; a viewer whose
access is unchanged stays connected."""

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.urls import reverse
from django.utils import timezone

from apps.tenancy.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from apps.tenancy.models import AccessToken, Membership, Role
from config.asgi import application
from tests.conftest import bearer_client
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


@pytest.fixture
def job(acme, cluster):
    return make_job(project=acme.project, user=acme.users[Role.MEMBER], cluster=cluster)


@pytest.fixture
def push_only(settings):
    """A backstop far away: what closes the socket in time is the published message."""
    settings.TORUS_LIVE_ACCESS_RECHECK_SECONDS = 60


async def _open(job, *headers) -> WebsocketCommunicator:
    ws = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=[ORIGIN, *headers])
    connected, code = await ws.connect(timeout=5)
    assert connected, code
    assert (await ws.receive_json_from(timeout=10))["type"] == "backlog"
    return ws


def _bearer(token: str):
    return (b"authorization", f"Bearer {token}".encode())


async def _session_cookie(user) -> tuple:
    client = bearer_client(None)
    await sync_to_async(client.force_login)(user)
    return client, (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


async def _close_code(ws, within: float):
    """The close code the socket gets within `within` seconds (None: still open). Polls with
    receive_nothing, which, unlike a timed-out receive, leaves the consumer running."""
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        if await ws.receive_nothing(timeout=0.1):
            continue
        output = await ws.receive_output()
        if output["type"] == "websocket.close":
            return output.get("code")
    return None


async def test_revoked_token_closes_4401_and_other_viewers_stay(es, acme, job, push_only):
    revoked = await _open(job, _bearer(acme.tokens[Role.VIEWER]))
    unchanged = await _open(job, _bearer(acme.tokens[Role.MEMBER]))
    token = await sync_to_async(AccessToken.objects.get)(
        tenant=acme.tenant, user=acme.users[Role.VIEWER]
    )
    url = reverse("token-detail", kwargs={"pk": token.pk})
    response = await sync_to_async(acme.client(Role.ADMIN).delete)(url)
    assert response.status_code == 204
    assert await _close_code(revoked, within=3) == CLOSE_UNAUTHENTICATED
    assert await _close_code(unchanged, within=1.5) is None  # still open, still served
    await unchanged.disconnect()


async def test_removed_membership_closes_4403(es, acme, job, push_only):
    _, cookie = await _session_cookie(acme.users[Role.VIEWER])
    ws = await _open(job, cookie)
    membership = await sync_to_async(Membership.objects.get)(
        tenant=acme.tenant, user=acme.users[Role.VIEWER]
    )
    url = reverse("membership-detail", kwargs={"pk": membership.pk})
    response = await sync_to_async(acme.client(Role.OWNER).delete)(url)
    assert response.status_code == 204
    assert await _close_code(ws, within=3) == CLOSE_FORBIDDEN


async def test_a_role_change_that_still_reads_keeps_the_socket(es, acme, job, push_only):
    _, cookie = await _session_cookie(acme.users[Role.VIEWER])
    ws = await _open(job, cookie)
    membership = await sync_to_async(Membership.objects.get)(
        tenant=acme.tenant, user=acme.users[Role.VIEWER]
    )
    url = reverse("membership-detail", kwargs={"pk": membership.pk})
    response = await sync_to_async(acme.client(Role.OWNER).patch)(url, {"role": "member"})
    assert response.status_code == 200
    assert await _close_code(ws, within=2) is None
    await ws.disconnect()


async def test_logout_closes_that_sessions_sockets_4401(es, acme, job, push_only):
    client, cookie = await _session_cookie(acme.users[Role.MEMBER])
    ws = await _open(job, cookie)
    _, other_cookie = await _session_cookie(acme.users[Role.MEMBER])  # another browser
    other = await _open(job, other_cookie)
    response = await sync_to_async(client.post)(reverse("auth-logout"))
    assert response.status_code == 204
    assert await _close_code(ws, within=3) == CLOSE_UNAUTHENTICATED
    assert await _close_code(other, within=1) is None
    await other.disconnect()


async def test_expiry_is_caught_by_the_periodic_recheck(es, acme, job, settings):
    """Nothing is published when a token expires: the backstop re-check closes the socket."""
    settings.TORUS_LIVE_ACCESS_RECHECK_SECONDS = 1
    ws = await _open(job, _bearer(acme.tokens[Role.OWNER]))
    await sync_to_async(
        AccessToken.objects.filter(tenant=acme.tenant, user=acme.users[Role.OWNER]).update
    )(expires_at=timezone.now() - timedelta(seconds=1))
    assert await _close_code(ws, within=4) == CLOSE_UNAUTHENTICATED


def test_the_sdk_reports_a_revoked_token_as_a_clear_error(asgi_server, es, acme, job, settings):
    """The SDK (client/torus/live.py) turns the close code into a TorusError with a message,
    not a traceback."""
    import threading

    from django.db import connection

    from apps.tenancy.services import token_create, token_revoke
    from torus import Client, TorusError

    settings.TORUS_LIVE_ACCESS_RECHECK_SECONDS = 60
    token, plaintext = token_create(
        actor=None, user=acme.users[Role.VIEWER], tenant=acme.tenant, name="sdk"
    )
    client = Client(url=asgi_server.url, token=plaintext)
    follow = client.follow_logs(str(job.pk))

    def revoke():
        try:
            token_revoke(actor=None, token=token)
        finally:
            connection.close()

    threading.Timer(1.0, revoke).start()
    with pytest.raises(TorusError) as caught:
        for _ in follow:
            pass
    assert caught.value.status == 401 and caught.value.code == "not_authenticated"
    assert "no longer valid" in str(caught.value)
