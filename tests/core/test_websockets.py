"""The ASGI application serves websockets through Channels with the real Redis channel layer."""

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from apps.tenancy.consumers import CLOSE_UNAUTHENTICATED
from apps.tenancy.models import Role
from config.asgi import application
from tests.conftest import refused_with

pytestmark = pytest.mark.django_db(transaction=True)


async def test_channel_layer_round_trip_through_redis():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add("torus-test", channel)
    await layer.group_send("torus-test", {"type": "hello", "n": 1})
    assert await layer.receive(channel) == {"type": "hello", "n": 1}
    await layer.group_discard("torus-test", channel)


async def _connect(headers=(), subprotocols=None):
    communicator = WebsocketCommunicator(
        application,
        "/ws/me/",
        headers=[(b"origin", b"http://127.0.0.1:8000"), *headers],
        subprotocols=subprotocols,
    )
    connected, code = await communicator.connect()
    return communicator, connected, code


async def test_token_in_header_authenticates(acme):
    token = acme.tokens[Role.VIEWER]
    communicator, connected, _ = await _connect([(b"authorization", f"Bearer {token}".encode())])
    assert connected
    message = await communicator.receive_json_from()
    assert message["user"] == "acme-viewer"
    assert message["tenants"] == {str(acme.tenant.id): "viewer"}
    await communicator.disconnect()


async def test_token_in_subprotocol_authenticates(acme):
    token = acme.tokens[Role.MEMBER]
    communicator, connected, _ = await _connect(subprotocols=["torus", f"bearer.{token}"])
    assert connected
    assert (await communicator.receive_json_from())["user"] == "acme-member"
    await communicator.disconnect()


async def test_anonymous_and_bad_tokens_are_refused():
    for headers in ([], [(b"authorization", b"Bearer tor_nope")]):
        communicator = WebsocketCommunicator(
            application, "/ws/me/", headers=[(b"origin", b"http://127.0.0.1:8000"), *headers]
        )
        assert await refused_with(communicator) == CLOSE_UNAUTHENTICATED


async def test_foreign_origin_is_refused(acme):
    token = acme.tokens[Role.VIEWER]
    communicator = WebsocketCommunicator(
        application,
        "/ws/me/",
        headers=[
            (b"origin", b"http://evil.example"),
            (b"authorization", f"Bearer {token}".encode()),
        ],
    )
    connected, _ = await communicator.connect()
    assert not connected
