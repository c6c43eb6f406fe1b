"""The gateway in front of real deployments: made through the API, replicas as Slurm jobs
running llama-server as the deploying user, the deployments' reconciler in a background loop
(tests/serving/conftest.py). Requests go through the whole portal (uvicorn, config.asgi)."""

import json
import os
import signal
import threading
import time

import httpx
import pytest

from apps.serving import routes
from apps.serving.models import Deployment, DeploymentEvent, ServingRequest
from apps.tenancy.models import Role
from tests.kubernetes.kube_helpers import wait_for as until
from tests.serving.conftest import (
    deploy,
    engine_pid,
    flush_records,
    register_gguf,
    wait_dead,
    wait_for,
    wait_ready,
)
from tests.serving.test_gateway import COMPLETION, assert_openai_error, call

pytestmark = pytest.mark.django_db(transaction=True)


class Traffic:
    """Clients sending requests without pause (odd ones streaming) until stopped; each
    result is (began, status, replica id); a broken stream counts as -1."""

    def __init__(self, base_url: str, deployment_id, token: str, *, clients: int = 4):
        self.results: list[tuple[float, int, str]] = []
        self.stop = threading.Event()
        self.path = f"/serve/{deployment_id}/v1/completions"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.threads = [
            threading.Thread(target=self._loop, args=(base_url, i % 2 == 1)) for i in range(clients)
        ]
        for thread in self.threads:
            thread.start()

    def _loop(self, base_url: str, stream: bool) -> None:
        body = {**COMPLETION, "max_tokens": 16, "stream": stream}
        with httpx.Client(base_url=base_url, timeout=120) as client:
            while not self.stop.is_set():
                began = time.monotonic()
                try:
                    response = client.post(self.path, json=body, headers=self.headers)
                    status = response.status_code
                    if stream and status == 200 and not response.text.rstrip().endswith("[DONE]"):
                        status = -1
                    self.results.append((began, status, response.headers.get("x-torus-replica")))
                except httpx.HTTPError:
                    self.results.append((began, -1, None))

    def finish(self) -> list[tuple[float, int, str]]:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)
        return self.results


def test_completions_streaming_and_scoping_on_a_real_deployment(
    acme, globex, gguf_version, serving_loop, asgi_server
):
    client = acme.client(Role.MEMBER)
    made = deploy(client, acme.project, replicas=1, slots=2, context=512)
    other = deploy(client, acme.project, name="other", replicas=1, slots=2, context=512)
    deployment = wait_ready(made["id"], replicas=1, timeout=300)
    key = client.post(f"/api/v1/deployments/{made['id']}/keys/", {"name": "ci"}, format="json")
    others_key = client.post(
        f"/api/v1/deployments/{other['id']}/keys/", {"name": "ci"}, format="json"
    )
    assert key.status_code == others_key.status_code == 201
    token = acme.tokens[Role.MEMBER]
    with httpx.Client(base_url=asgi_server.url, timeout=60) as gateway:
        answer = call(gateway, deployment, token, json={**COMPLETION, "model": "tiny"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == 8
        chat = {
            "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 6,
            "ignore_eos": True,
            "stream": True,
        }
        with gateway.stream(
            "POST",
            f"/serve/{deployment.pk}/v1/chat/completions",
            json=chat,
            headers={"Authorization": f"Bearer {token}"},
        ) as stream:
            assert stream.status_code == 200
            events = [line for line in stream.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) >= 7
        assert json.loads(events[0][6:])["object"] == "chat.completion.chunk"

        assert call(gateway, deployment, key.json()["token"], json=COMPLETION).status_code == 200
        assert_openai_error(call(gateway, deployment, None, json=COMPLETION), 401)
        assert_openai_error(
            call(gateway, deployment, globex.tokens[Role.OWNER], json=COMPLETION), 404
        )
        assert_openai_error(
            call(gateway, deployment, others_key.json()["token"], json=COMPLETION), 404
        )
        # the key revoked through the API: refused from the next request on
        revoke = f"/api/v1/deployments/{made['id']}/keys/{key.json()['id']}/"
        assert client.delete(revoke).status_code == 204
        assert_openai_error(call(gateway, deployment, key.json()["token"], json=COMPLETION), 401)

    flush_records(made["id"], at_least=3)
    usage = client.get(f"/api/v1/deployments/{made['id']}/usage/?minutes=5")
    assert usage.status_code == 200
    totals = usage.json()["totals"]
    assert totals["requests"] == 3 and totals["tokens_out"] == 8 + 6 + 8
    assert client.get(f"/api/v1/deployments/{made['id']}/usage/?minutes=0").status_code == 400
    replica = deployment.replicas.get(state="READY")
    assert set(
        ServingRequest.objects.filter(deployment=deployment).values_list("replica", flat=True)
    ) == {replica.pk}


def test_a_replica_process_killed_mid_traffic(acme, gguf_version, serving_loop, asgi_server):
    """Two replicas under traffic; one's engine process is killed. Only requests in flight
    on it may fail (a stream cut short; an answer not yet begun is retried); every request
    begun after the kill succeeds; the replica is reported and a replacement started."""
    client = acme.client(Role.MEMBER)
    made = deploy(client, acme.project, replicas=2, replicas_max=2, slots=2, context=512)
    deployment = wait_ready(made["id"], replicas=2, timeout=300)
    doomed, survivor = deployment.replicas.filter(state="READY").order_by("created_at")
    traffic = Traffic(asgi_server.url, made["id"], acme.tokens[Role.MEMBER])
    both = {str(doomed.pk), str(survivor.pk)}
    until(lambda: {r[2] for r in list(traffic.results) if r[1] == 200} >= both, what="both answer")
    pid = engine_pid(doomed.port)
    os.kill(pid, signal.SIGKILL)
    wait_dead(pid)  # a request begun while it was still dying was in flight on it
    killed_at = time.monotonic()
    until(lambda: sum(r[0] >= killed_at for r in list(traffic.results)) >= 8, what="8 after it")
    results = traffic.finish()

    before = [r for r in results if r[0] < killed_at]
    after = [r for r in results if r[0] >= killed_at]
    assert {r[2] for r in before if r[1] == 200} == {str(doomed.pk), str(survivor.pk)}
    assert len([r for r in before if r[1] != 200]) <= 4  # at most the requests in flight
    assert after and all(r[1] == 200 for r in after), sorted({r[1] for r in after})
    doomed.refresh_from_db()
    assert doomed.state in ("UNHEALTHY", "STOPPED")
    originals = {doomed.pk, survivor.pk}

    def replaced(d: Deployment) -> bool:  # the reconciler starts another in its place
        return d.replicas.exclude(pk__in=originals).exists()

    wait_for(made["id"], condition=replaced, timeout=60, what="a replacement started")


def test_rolling_update_under_traffic_fails_no_request(
    acme, gguf_version, serving_loop, asgi_server, tiny_gguf
):
    client = acme.client(Role.MEMBER)
    made = deploy(client, acme.project, replicas=2, replicas_max=2, slots=2, context=512)
    wait_ready(made["id"], replicas=2, timeout=300)
    traffic = Traffic(asgi_server.url, made["id"], acme.tokens[Role.MEMBER])
    until(lambda: len(traffic.results) >= 4, what="traffic flowing")
    new = register_gguf(acme, tiny_gguf)  # version 2, `production` moves to it
    try:

        def rolled(d: Deployment) -> bool:
            ready = d.replicas.filter(state="READY")
            return (
                d.version_id == new.pk
                and d.state == "READY"
                and ready.count() == 2
                and not ready.exclude(version=new).exists()
            )

        wait_for(made["id"], condition=rolled, timeout=240, what="the rollout")
        done = time.monotonic()  # traffic on the new replicas too, then at least 20 in all
        until(lambda: sum(r[0] >= done for r in list(traffic.results)) >= 4, what="after it")
        until(lambda: len(traffic.results) >= 20, what="20 requests")
    finally:
        results = traffic.finish()
    statuses = [r[1] for r in results]
    assert statuses and set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    assert len(results) >= 20
    kinds = list(
        DeploymentEvent.objects.filter(deployment_id=made["id"]).values_list("kind", flat=True)
    )
    assert "rollout_started" in kinds and "rollout_done" in kinds
    for replica in Deployment.objects.get(pk=made["id"]).replicas.all():
        assert routes.inflight(replica_id=replica.pk) == 0


def test_scale_from_zero_through_the_first_request(acme, gguf_version, serving_loop, asgi_server):
    client = acme.client(Role.MEMBER)
    made = deploy(client, acme.project, replicas=1, slots=2, context=512, scale_to_zero_after_s=10)
    wait_ready(made["id"], replicas=1, timeout=300)

    def idle(d: Deployment) -> bool:
        return d.state == "IDLE" and not d.replicas.filter(state__in=("STARTING", "READY"))

    deployment = wait_for(made["id"], condition=idle, timeout=120, what="scaled to zero")
    with httpx.Client(base_url=asgi_server.url, timeout=200) as gateway:
        first = call(gateway, deployment, acme.tokens[Role.MEMBER], json=COMPLETION)
        assert first.status_code == 200, first.text
        assert first.json()["usage"]["completion_tokens"] == 8
    woken = DeploymentEvent.objects.filter(deployment_id=made["id"], kind="woken").get()
    assert woken.data["cold_start_s"] > 0
    flush_records(made["id"], at_least=1)
    row = ServingRequest.objects.get(deployment_id=made["id"])  # held, then answered
    assert (row.status, row.retried, row.tokens_out) == (200, False, 8)
