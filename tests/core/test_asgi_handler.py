"""The HTTP side of config.asgi (apps/core/streaming.py::StreamingASGIHandler): a request's
synchronous work runs in one thread call, on a thread kept for the next request; answers and
errors come out whole (streamed bodies and responses: tests/datasets/test_streaming.py)."""

import threading

import pytest
from channels.testing import HttpCommunicator
from django.core import signals

from apps.tenancy.models import Role
from config.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def seen():
    """The thread of each request_started and request_finished."""
    events: list[tuple[str, int]] = []

    def started(**kwargs):
        events.append(("started", threading.get_ident()))

    def finished(**kwargs):
        events.append(("finished", threading.get_ident()))

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    yield events
    signals.request_started.disconnect(started)
    signals.request_finished.disconnect(finished)


async def _get(path: str, headers=()):
    headers = [(b"host", b"127.0.0.1"), *headers]
    communicator = HttpCommunicator(application, "GET", path, headers=headers)
    return await communicator.get_response(timeout=30)


async def test_requests_share_a_kept_thread_and_close_on_it(acme, seen):
    token = acme.tokens[Role.MEMBER]
    auth = [(b"authorization", f"Bearer {token}".encode())]
    for _ in range(5):
        response = await _get("/api/v1/projects/", auth)
        assert response["status"] == 200
        assert b'"results"' in response["body"]
    threads = {ident for _, ident in seen}
    main = threading.get_ident()
    assert main not in threads  # never on the event loop
    assert len(threads) == 1  # one kept thread for requests one after another
    assert [kind for kind, _ in seen] == ["started", "finished"] * 5


async def test_errors_and_unknown_routes_answer_whole(acme, seen):
    response = await _get("/api/v1/projects/")
    assert response["status"] == 401
    assert b'"error"' in response["body"]
    response = await _get("/api/v1/no-such-thing/")
    assert response["status"] == 404
    assert [kind for kind, _ in seen] == ["started", "finished"] * 2
