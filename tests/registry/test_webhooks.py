"""Webhooks against a real HTTP receiver on the loopback, delivered by a real Celery worker:
signatures, retries with backoff, the delivery log, no redirects, and the refusal of URLs that
lead into the platform's own network (at registration and again at every try)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apps.registry import webhooks
from apps.registry.deliveries import backoff_seconds
from apps.registry.models import Webhook, WebhookDelivery
from apps.tenancy.models import Role
from tests.registry.test_api import create_model, models_url, upload_version


class Receiver:
    """A local HTTP server recording every request; `replies` are the status codes to answer
    in turn (the last one repeats)."""

    def __init__(self, replies=(200,)):
        self.requests: list[dict] = []
        self.replies = list(replies)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                code = receiver.replies.pop(0) if len(receiver.replies) > 1 else receiver.replies[0]
                self.send_response(code)
                if code in (301, 302, 307):
                    self.send_header("Location", f"http://127.0.0.1:{receiver.port}/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        if self.thread.is_alive():
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(timeout=5)


@pytest.fixture
def receiver():
    made = []

    def make(replies=(200,)):
        made.append(Receiver(replies))
        return made[-1]

    yield make
    for item in made:
        item.close()


def wait_for(condition, timeout=60):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.1)


def settled(*, count: int):
    def check():
        rows = WebhookDelivery.objects.all()
        return rows.count() >= count and not rows.filter(state="pending").exists()

    return check


def add_hook(acme, url, events=("model_version.created", "alias.changed")):
    response = acme.client(Role.ADMIN).post(
        "/api/v1/webhooks/", {"url": url, "events": list(events)}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_signed_posts_on_new_version_and_alias_move(
    acme, models_area, celery_worker, receiver, settings
):
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    site = receiver()
    hook = add_hook(acme, site.url)
    assert hook["secret"].startswith("whsec_")
    shown = acme.client(Role.ADMIN).get(f"/api/v1/webhooks/{hook['id']}/").json()
    assert "secret" not in shown  # shown once

    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(client, model["id"], {"w.bin": b"weights"}, metrics={"acc": 0.9})
    client.put(models_url(model["id"], "aliases", "production"), {"version": 1}, format="json")
    wait_for(lambda: len(site.requests) == 2)
    wait_for(settled(count=2))

    by_event = {r["headers"]["X-Torus-Event"]: r for r in site.requests}
    assert set(by_event) == {"model_version.created", "alias.changed"}
    for request in site.requests:
        headers = request["headers"]
        assert webhooks.verify(
            secret=hook["secret"],
            timestamp=headers["X-Torus-Timestamp"],
            body=request["body"],
            signature=headers["X-Torus-Signature"],
        )
        # a changed body or another secret does not verify
        assert not webhooks.verify(
            secret=hook["secret"],
            timestamp=headers["X-Torus-Timestamp"],
            body=request["body"] + b" ",
            signature=headers["X-Torus-Signature"],
        )
        assert not webhooks.verify(
            secret="whsec_other",
            timestamp=headers["X-Torus-Timestamp"],
            body=request["body"],
            signature=headers["X-Torus-Signature"],
        )
    created = json.loads(by_event["model_version.created"]["body"])
    assert created["model"]["name"] == "resnet" and created["version"]["number"] == 1
    assert created["version"]["metrics"] == {"acc": 0.9} and created["tenant"] == "acme"
    moved = json.loads(by_event["alias.changed"]["body"])
    assert (moved["alias"], moved["from_version"], moved["to_version"]) == ("production", None, 1)

    log = acme.client(Role.ADMIN).get(f"/api/v1/webhooks/{hook['id']}/deliveries/").json()
    assert sorted(
        (d["event"], d["state"], d["attempts"], d["response_code"]) for d in log["results"]
    ) == [
        ("alias.changed", "succeeded", 1, 200),
        ("model_version.created", "succeeded", 1, 200),
    ]
    # members and viewers do not see the tenant's webhooks or their log
    assert (
        acme.client(Role.MEMBER).get(f"/api/v1/webhooks/{hook['id']}/deliveries/").status_code
        == 403
    )


def test_failed_tries_are_retried_until_one_succeeds(
    acme, models_area, celery_worker, receiver, settings
):
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    settings.TORUS_WEBHOOK_BACKOFF_SECONDS = 0
    site = receiver(replies=(500, 503, 200))
    add_hook(acme, site.url, events=["model_version.created"])
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(client, model["id"], {"w.bin": b"w"})
    wait_for(settled(count=1))
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.response_code) == ("succeeded", 3, 200)
    assert len(site.requests) == 3
    # the same delivery each time (one id), signed afresh
    assert len({r["headers"]["X-Torus-Delivery"] for r in site.requests}) == 1


def test_a_receiver_that_keeps_failing_ends_failed_in_the_log(
    acme, models_area, celery_worker, receiver, settings
):
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    settings.TORUS_WEBHOOK_BACKOFF_SECONDS = 0
    settings.TORUS_WEBHOOK_MAX_ATTEMPTS = 3
    site = receiver(replies=(500,))
    add_hook(acme, site.url, events=["model_version.created"])
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(client, model["id"], {"w.bin": b"w"})
    wait_for(settled(count=1))
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.response_code) == ("failed", 3, 500)
    assert delivery.error == "HTTP 500"
    assert len(site.requests) == 3


def test_redirects_are_not_followed(acme, models_area, celery_worker, receiver, settings):
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    settings.TORUS_WEBHOOK_MAX_ATTEMPTS = 1
    site = receiver(replies=(302,))
    add_hook(acme, site.url, events=["model_version.created"])
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(client, model["id"], {"w.bin": b"w"})
    wait_for(settled(count=1))
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == "failed" and delivery.response_code == 302
    assert "redirects are not followed" in delivery.error
    assert [r["path"] for r in site.requests] == ["/hook"]


def test_backoff_doubles_from_the_base(settings):
    settings.TORUS_WEBHOOK_BACKOFF_SECONDS = 10
    for attempts, base in ((1, 10), (2, 20), (3, 40), (5, 160)):
        wait = backoff_seconds(attempts)
        assert base <= wait <= base * 1.1


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://172.16.0.1/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "http://[::1]/hook",
        "http://[fe80::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://2130706433/hook",
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "http://user:pw@example.com/hook",
        "http://no-such-host.invalid/hook",
    ],
)
def test_urls_into_the_platforms_network_are_refused(acme, url):
    response = acme.client(Role.ADMIN).post(
        "/api/v1/webhooks/", {"url": url, "events": ["alias.changed"]}, format="json"
    )
    assert response.status_code == 400, (url, response.content)
    assert "url" in response.json()["error"]["fields"]
    assert not Webhook.objects.exists()


def test_the_operator_allows_a_cidr(acme, settings):
    settings.TORUS_WEBHOOK_ALLOWED_CIDRS = ["127.0.0.0/8"]
    add_hook(acme, "http://127.0.0.1:9/hook")
    response = acme.client(Role.ADMIN).post(
        "/api/v1/webhooks/", {"url": "http://10.0.0.1/", "events": ["alias.changed"]}, format="json"
    )
    assert response.status_code == 400


def test_every_try_checks_the_address_again(acme, models_area, celery_worker, receiver, settings):
    """A URL allowed when it was registered but leading to a refused address when the event
    comes (the operator's allowance withdrawn, or DNS now answering 127.0.0.1) is not called."""
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    site = receiver()
    add_hook(acme, site.url, events=["model_version.created"])
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = False
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(client, model["id"], {"w.bin": b"w"})
    wait_for(settled(count=1))
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == "failed" and delivery.attempts == 1
    assert "not public" in delivery.error and delivery.response_code is None
    assert site.requests == []


def test_another_tenants_webhooks_are_not_found(acme, globex, settings):
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    hook = add_hook(acme, "http://127.0.0.1:9/hook")
    stranger = globex.client(Role.OWNER)
    url = f"/api/v1/webhooks/{hook['id']}/"
    assert stranger.get(url).status_code == 404
    assert stranger.get(f"{url}deliveries/").status_code == 404
    assert stranger.patch(url, {"active": False}, format="json").status_code == 404
    assert stranger.delete(url).status_code == 404
    assert stranger.get("/api/v1/webhooks/").json()["results"] == []
    assert Webhook.objects.get().active


def test_an_unreachable_receiver_is_retried_then_failed(
    acme, models_area, celery_worker, receiver, settings
):
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    settings.TORUS_WEBHOOK_BACKOFF_SECONDS = 0
    settings.TORUS_WEBHOOK_MAX_ATTEMPTS = 2
    site = receiver()
    url = site.url
    site.close()  # nothing listens there any more
    add_hook(acme, url, events=["model_version.created"])
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(client, model["id"], {"w.bin": b"w"})
    wait_for(settled(count=1))
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.response_code) == ("failed", 2, None)
    assert "ConnectError" in delivery.error
