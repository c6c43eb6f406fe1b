"""The serving gateway on the real engine (llama-server, a tiny random-weight Llama).

These tests start llama-server processes themselves and register them as READY replicas of a
deployment row, so the gateway is tested alone: authentication and scoping, balancing,
streaming, retries when a replica dies, limits and the per-request records. The end-to-end
tests through real deployments (replica jobs, rollout, scale from zero) are in
test_gateway_e2e.py.
"""

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from apps.registry.models import ModelVersion, RegisteredModel
from apps.serving import keys, records, routes
from apps.serving.models import (
    Deployment,
    DeploymentKey,
    DeploymentState,
    Replica,
    ReplicaState,
    ServingRequest,
)
from apps.tenancy.models import Role
from scripts.devstack import free_port
from tests.kubernetes.kube_helpers import wait_for as until
from tests.serving.conftest import flush_records

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


class Engine:
    """One llama-server on 127.0.0.1, started as a replica job would start it (the engine key
    in the environment), killed by its own pid. The model: conftest's tiny_gguf."""

    def __init__(self, model: Path, *, api_key: str, logdir: Path, slots: int = 4, ctx: int = 512):
        self.port = free_port()
        self.log = open(logdir / f"engine-{self.port}.log", "wb")  # noqa: SIM115
        env = {**os.environ, "LLAMA_ARG_API_KEY": api_key}
        argv = [settings.TORUS_LLAMA_SERVER, "-m", str(model), "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), "-np", str(slots), "-c", str(slots * ctx), "-t", "1"]
        argv += ["--metrics", "--alias", "tiny:1"]
        self.proc = subprocess.Popen(
            argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, (logdir / f"engine-{self.port}.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "llama-server did not become healthy"
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
        self.log.close()


@pytest.fixture
def engines(tiny_gguf, tmp_path):
    started: list[Engine] = []

    def start(deployment, **kwargs) -> Engine:
        engine = Engine(
            tiny_gguf,
            api_key=keys.engine_key(deployment_id=deployment.pk),
            logdir=tmp_path,
            **kwargs,
        )
        started.append(engine)
        return engine

    yield start
    for engine in started:
        engine.stop()


def make_deployment(world, *, name: str = "chat", **fields) -> Deployment:
    owner = world.users[Role.OWNER]
    model, _ = RegisteredModel.objects.get_or_create(
        tenant=world.tenant, project=world.project, name="tiny", defaults={"created_by": owner}
    )
    version, _ = ModelVersion.objects.get_or_create(
        model=model, number=1, defaults={"framework": "gguf", "state": "ready"}
    )
    fields.setdefault("state", DeploymentState.READY)
    return Deployment.objects.create(
        tenant=world.tenant,
        project=world.project,
        name=name,
        model=model,
        ref="tiny:1",
        version=version,
        created_by=owner,
        **fields,
    )


def add_replica(deployment, engine: Engine) -> Replica:
    replica = Replica.objects.create(
        deployment=deployment,
        version=deployment.version,
        state=ReplicaState.READY,
        host="127.0.0.1",
        port=engine.port,
    )
    routes.publish(deployment_id=deployment.pk)
    return replica


def add_key(deployment, name: str = "k") -> str:
    plaintext, prefix, digest = keys.new_token()
    DeploymentKey.objects.create(deployment=deployment, name=name, prefix=prefix, token_hash=digest)
    routes.publish(deployment_id=deployment.pk)
    return plaintext


@pytest.fixture
def served(acme, engines, asgi_server):
    """A deployment of acme with one replica, and a client for the gateway."""
    deployment = make_deployment(acme)
    engine = engines(deployment)
    replica = add_replica(deployment, engine)
    with httpx.Client(base_url=asgi_server.url, timeout=60) as client:
        yield dict(deployment=deployment, engine=engine, replica=replica, client=client)


def call(client, deployment, token, endpoint="/v1/completions", **kwargs):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers.update(kwargs.pop("headers", {}))
    method = "GET" if endpoint == "/v1/models" else "POST"
    return client.request(method, f"/serve/{deployment.pk}{endpoint}", headers=headers, **kwargs)


def assert_openai_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"]
    if code is not None:
        assert error["code"] == code
    return error


COMPLETION = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": True}


def test_completion_and_streaming_chat_through_the_gateway(served, acme):
    client, deployment = served["client"], served["deployment"]
    token = acme.tokens[Role.MEMBER]

    done = call(client, deployment, token, json=COMPLETION)
    assert done.status_code == 200, done.text
    answer = done.json()
    assert answer["object"] == "text_completion"
    assert answer["usage"]["completion_tokens"] == 8
    assert done.headers["x-torus-replica"] == str(served["replica"].pk)

    chat = {
        "model": "chat",
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {token}"}
    with client.stream(
        "POST", f"/serve/{deployment.pk}/v1/chat/completions", json=chat, headers=headers
    ) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    text = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )
    assert chunks[0]["object"] == "chat.completion.chunk" and text

    models = call(client, deployment, token, "/v1/models")
    assert models.status_code == 200
    assert "chat" in [m["id"] for m in models.json()["data"]]

    flush_records(deployment.pk, at_least=3)
    rows = {r.path: r for r in ServingRequest.objects.filter(deployment=deployment)}
    assert set(rows) == {"/v1/completions", "/v1/chat/completions", "/v1/models"}
    completion, streamed = rows["/v1/completions"], rows["/v1/chat/completions"]
    assert (completion.status, completion.stream, completion.tokens_out) == (200, False, 8)
    assert completion.tokens_in > 0 and completion.replica_id == served["replica"].pk
    assert completion.user_id == acme.users[Role.MEMBER].pk
    assert (streamed.status, streamed.stream, streamed.tokens_out) == (200, True, 12)
    assert streamed.ttft_ms is not None and streamed.ttft_ms <= streamed.latency_ms
    deployment.refresh_from_db()
    assert deployment.last_request_at is not None
    assert routes.last_request_at(deployment_id=deployment.pk) is not None
    assert routes.inflight(replica_id=served["replica"].pk) == 0

    usage = records.usage(deployment_id=deployment.pk, minutes=5)
    assert usage["totals"]["requests"] == 3
    assert usage["totals"]["tokens_out"] == 20
    assert len(usage["series"]) == 5 and sum(b["requests"] for b in usage["series"]) == 3


def test_who_may_call(served, acme, globex):
    client, deployment = served["client"], served["deployment"]

    assert_openai_error(call(client, deployment, None, json=COMPLETION), 401, "invalid_api_key")
    assert_openai_error(call(client, deployment, "tor_nonsense", json=COMPLETION), 401)
    basic = call(client, deployment, None, json=COMPLETION, headers={"Authorization": "Basic a"})
    assert_openai_error(basic, 401)
    # another tenant's token: the deployment does not exist for it
    assert_openai_error(
        call(client, deployment, globex.tokens[Role.OWNER], json=COMPLETION), 404, "not_found"
    )
    # a viewer of the tenant may see the deployment but not call it
    assert_openai_error(call(client, deployment, acme.tokens[Role.VIEWER], json=COMPLETION), 403)
    # an admin calls it in any project; a member in theirs
    assert call(client, deployment, acme.tokens[Role.ADMIN], json=COMPLETION).status_code == 200

    own = add_key(deployment)
    other = make_deployment(acme, name="other")
    others_key = add_key(other)
    assert call(client, deployment, own, json=COMPLETION).status_code == 200
    assert_openai_error(call(client, deployment, others_key, json=COMPLETION), 404, "not_found")
    assert_openai_error(call(client, deployment, "tsk_unknown", json=COMPLETION), 401)

    # a revoked key stops working as soon as the route is republished (D's key_revoke does)
    DeploymentKey.objects.filter(deployment=deployment).update(revoked_at="2026-01-01T00:00Z")
    routes.publish(deployment_id=deployment.pk)
    assert_openai_error(call(client, deployment, own, json=COMPLETION), 401)

    unknown = Deployment(pk="00000000-0000-0000-0000-000000000001")
    assert_openai_error(call(client, unknown, acme.tokens[Role.OWNER], json=COMPLETION), 404)

    flush_records(deployment.pk, at_least=2)  # only calls that passed authorisation
    statuses = ServingRequest.objects.filter(deployment=deployment).values_list("status", flat=True)
    assert sorted(statuses) == [200, 200]


def test_bad_input_is_answered_openai_style_and_the_gateway_keeps_serving(served, acme):
    client, deployment = served["client"], served["deployment"]
    token = acme.tokens[Role.MEMBER]
    Deployment.objects.filter(pk=deployment.pk).update(max_request_bytes=8192, max_tokens=64)
    routes.publish(deployment_id=deployment.pk)

    big = {**COMPLETION, "prompt": "word " * 2000}  # 10 kB
    assert_openai_error(call(client, deployment, token, json=big), 413, "request_too_large")
    error = assert_openai_error(
        call(client, deployment, token, json={**COMPLETION, "model": "gpt-4"}),
        404,
        "model_not_found",
    )
    assert error["param"] == "model"
    broken = call(
        client, deployment, token, content=b'{"prompt": "x",', headers={"content-type": "json"}
    )
    assert_openai_error(broken, 400, "invalid_json")
    assert_openai_error(call(client, deployment, token, json=["a list"]), 400, "invalid_json")
    error = assert_openai_error(
        call(client, deployment, token, json={**COMPLETION, "max_tokens": 65}), 400
    )
    assert error["param"] == "max_tokens"
    # a prompt longer than a slot's context (512 tokens here): the engine's 400, passed on
    long_prompt = {**COMPLETION, "prompt": "hello " * 700}
    engine_says = assert_openai_error(call(client, deployment, token, json=long_prompt), 400)
    assert "context" in engine_says["message"]
    assert call(client, deployment, token, "/v1/chat/completions", json={}).status_code == 400

    assert call(client, deployment, token, json=COMPLETION).status_code == 200
    assert served["engine"].proc.poll() is None


def test_tokens_per_minute_per_caller(served, acme):
    client, deployment = served["client"], served["deployment"]
    Deployment.objects.filter(pk=deployment.pk).update(tokens_per_minute=10)
    routes.publish(deployment_id=deployment.pk)
    member, admin = acme.tokens[Role.MEMBER], acme.tokens[Role.ADMIN]

    assert call(client, deployment, member, json=COMPLETION).status_code == 200  # 8 out + in
    refused = call(client, deployment, member, json=COMPLETION)
    error = assert_openai_error(refused, 429, "rate_limit_exceeded")
    assert error["type"] == "rate_limit_error"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert call(client, deployment, admin, json=COMPLETION).status_code == 200  # its own budget


def test_balancing_across_replicas_and_a_replica_killed_mid_traffic(acme, engines, asgi_server):
    """Four clients send requests without pause; one of two replicas is killed. Requests
    that were in flight on it may fail; every request begun after the kill succeeds (those
    sent to the dead replica are retried on the other), and the replica is reported."""
    deployment = make_deployment(acme)
    first, second = engines(deployment), engines(deployment)
    doomed, survivor = add_replica(deployment, first), add_replica(deployment, second)
    token = acme.tokens[Role.MEMBER]
    results: list[tuple[float, int, str]] = []  # (began, status, replica)
    stop = threading.Event()
    killed_at: list[float] = []

    def client_loop(stream: bool) -> None:
        body = {**COMPLETION, "max_tokens": 24, "stream": stream}
        with httpx.Client(base_url=asgi_server.url, timeout=60) as client:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    response = call(client, deployment, token, json=body)
                    ok = response.status_code
                    if stream and ok == 200 and not response.text.rstrip().endswith("[DONE]"):
                        ok = -1
                    results.append((began, ok, response.headers.get("x-torus-replica", "")))
                except httpx.HTTPError:
                    results.append((began, -1, ""))

    threads = [threading.Thread(target=client_loop, args=(i % 2 == 1,)) for i in range(4)]
    for thread in threads:
        thread.start()
    both = {str(doomed.pk), str(survivor.pk)}
    until(lambda: {r[2] for r in list(results) if r[1] == 200} >= both, what="both answering")
    first.kill()  # returns once the process is gone: requests begun from here find it dead
    killed_at.append(time.monotonic())
    until(lambda: sum(r[0] >= killed_at[0] for r in list(results)) >= 8, what="8 after the kill")
    stop.set()
    for thread in threads:
        thread.join(timeout=60)

    before = [r for r in results if r[0] < killed_at[0]]
    after = [r for r in results if r[0] >= killed_at[0]]
    assert {r[2] for r in before if r[1] == 200} == {str(doomed.pk), str(survivor.pk)}
    failed_before = [r for r in before if r[1] != 200]
    assert len(failed_before) <= 4  # at most those in flight then
    assert after and all(r[1] == 200 for r in after), [r[1] for r in after]
    assert {r[2] for r in after} == {str(survivor.pk)}

    doomed.refresh_from_db()
    assert doomed.state == ReplicaState.UNHEALTHY  # reported (services.report_replica_failure)
    route = json.loads(routes.redis_client().get(routes.ROUTE.format(deployment.pk)))
    assert [r["id"] for r in route["replicas"]] == [str(survivor.pk)]
    assert routes.inflight(replica_id=survivor.pk) == 0


def test_a_request_sent_to_a_dead_replica_is_retried_on_another(acme, engines, asgi_server):
    """Nothing was sent back, so the request goes to the next replica: the client sees one
    answer; the dead replica is reported and leaves the route."""
    deployment = make_deployment(acme)
    live = add_replica(deployment, engines(deployment))
    dead = Replica.objects.create(
        deployment=deployment,
        version=deployment.version,
        state=ReplicaState.READY,
        host="127.0.0.1",
        port=free_port(),  # nothing listens there
    )
    routes.publish(deployment_id=deployment.pk)
    # the live one looks busy, so the least-in-flight pick takes the dead one first
    routes.redis_client().set(routes.INFLIGHT.format(live.pk), 100)
    with httpx.Client(base_url=asgi_server.url, timeout=60) as client:
        for stream in (False, True):
            answer = call(
                client, deployment, acme.tokens[Role.MEMBER], json={**COMPLETION, "stream": stream}
            )
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-torus-replica"] == str(live.pk)
    flush_records(deployment.pk, at_least=1)
    first = ServingRequest.objects.filter(deployment=deployment).order_by("created_at").first()
    assert (first.status, first.retried, first.replica_id) == (200, True, live.pk)
    assert "refused" in first.error
    dead.refresh_from_db()
    assert dead.state == ReplicaState.UNHEALTHY

    def routed() -> list[str]:  # republished just after that commit, by the reporting thread
        route = json.loads(routes.redis_client().get(routes.ROUTE.format(deployment.pk)))
        return [r["id"] for r in route["replicas"]]

    until(lambda: routed() == [str(live.pk)], what="the dead replica out of the route",
          timeout=10, explain=routed)  # fmt: skip
    assert routes.inflight(replica_id=live.pk) == 100  # every request counted out again
