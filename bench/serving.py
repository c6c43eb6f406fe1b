"""Serving gateway benchmark: the same streaming completions sent to a llama-server replica
directly and through the gateway (/serve/<id>/v1/completions on the portal's uvicorn), in the
same run, at 1, 4 and 16 concurrent clients; and a cold start from zero replicas.

  direct   POST http://127.0.0.1:<replica>/v1/completions with the engine key
  gateway  POST http://127.0.0.1:<portal>/serve/<deployment>/v1/completions with a tenant
           token: authentication, route table, least-in-flight pick, SSE relayed, a record
  relay    the direct request through HAProxy in `mode tcp` (Debian's): no HTTP parsing, no
           authentication; the least any proxy in front of the engine costs, for scale

Each request streams (`stream: true`, `ignore_eos`, `max_tokens` tokens, so every answer has
the same length); a client is a thread on a keep-alive connection (http.client) that reads
the server-sent events as they come. The paths take turns in rounds (the machine's load,
shared with other work, falls on both alike). Per path and concurrency: tokens/s (all tokens
over the summed wall time of its rounds), time to first token and whole-request latency
p50/p95. Ratios are gateway over direct (aims: latency <= 1.1x, throughput >= 0.9x).

Cold start: the deployment scaled to zero, one request through the gateway, which wakes it
and holds the request; a thread stands in for the reconciler (starts llama-server and
registers the replica when the deployment wants one again, no Slurm). The time to the first
token and its parts.

Run alone:  .venv/bin/python bench/serving.py [--quick] [--requests N] [--keep-logs]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "serving", "metrics": {...}, "peers": {...}, "ratios": {...}}
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "10")  # its web server's Redis databases: 10-12

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ROOT,
    django_setup,
    ensure_tenant,
    environment,
    finish,
    manage,
    percentiles,
    process_cpu_seconds,
)
from _common import log as _log

from scripts.devstack import Proc, free_port, start_relay, start_web, stop_all, wait_answering

CONCURRENCY = (1, 4, 16)
PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over",
    "In the beginning the platform",
    "Tell me about the weather in",
    "A list of things to do today:",
]


def log(msg: str) -> None:
    _log("serving", msg)


def make_model(logdir: Path) -> Path:
    from django.conf import settings

    out = logdir / "tiny.gguf"
    subprocess.run(  # noqa: S603
        [sys.executable, str(ROOT / "examples/serving/make_tiny_llama.py"), str(out)],
        check=True,
        cwd=ROOT,
        capture_output=True,
        env={**os.environ, "TORUS_LLAMA_VOCAB": settings.TORUS_LLAMA_VOCAB},
    )
    return out


def start_engine(model: Path, logdir: Path, *, api_key: str, slots: int) -> tuple[Proc, int]:
    from django.conf import settings

    port = free_port()
    argv = [settings.TORUS_LLAMA_SERVER, "-m", str(model), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "-np", str(slots), "-c", str(slots * 1024), "-t", "1"]
    argv += ["--metrics", "--alias", "tiny:1"]
    proc = Proc(f"engine-{port}", argv, logdir, env={**os.environ, "LLAMA_ARG_API_KEY": api_key})
    wait_answering(f"http://127.0.0.1:{port}/health", proc=proc, timeout=60)
    return proc, port


def fixture(*, slots: int, max_tokens: int):
    """The bench tenant's deployment `bench` (previous runs' rows removed) of a model row."""
    from apps.registry.models import ModelVersion, RegisteredModel
    from apps.serving.models import Deployment, DeploymentState

    world = ensure_tenant(
        slug="bench-serving",
        project_slug="serve",
        owner="bench-serving-owner",
        token_name="bench-serving",
    )
    Deployment.objects.filter(project=world["project"]).delete()
    model, _ = RegisteredModel.objects.get_or_create(
        tenant=world["tenant"],
        project=world["project"],
        name="tiny",
        defaults={"created_by": world["user"]},
    )
    version, _ = ModelVersion.objects.get_or_create(
        model=model, number=1, defaults={"framework": "gguf", "state": "ready"}
    )
    deployment = Deployment.objects.create(
        tenant=world["tenant"],
        project=world["project"],
        name="bench",
        model=model,
        ref="tiny:1",
        version=version,
        created_by=world["user"],
        state=DeploymentState.READY,
        slots=slots,
        max_tokens=max_tokens,
    )
    return world, deployment


def register_replica(deployment, port: int):
    from apps.serving import routes
    from apps.serving.models import Replica, ReplicaState

    replica = Replica.objects.create(
        deployment=deployment,
        version=deployment.version,
        state=ReplicaState.READY,
        host="127.0.0.1",
        port=port,
    )
    routes.publish(deployment_id=deployment.pk)
    return replica


class Target:
    """`fresh`: a new connection for each request (llama-server closes one after a stream, so
    a direct client reconnects each time; the gateway keeps its clients' connections)."""

    def __init__(self, name: str, port: int, path: str, token: str, *, fresh: bool = False):
        self.name, self.port, self.path, self.fresh = name, port, path, fresh
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


class Conn:
    """A blocking HTTP/1.1 client on one socket (TCP_NODELAY, one send per request, the
    chunked answer read as it comes): the same client for both paths, nothing buffered
    between the socket and the clock."""

    def __init__(self, port: int):
        self.port, self.sock = port, None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        return data

    def stream(self, target: "Target", body: bytes) -> dict:
        import socket

        started = time.perf_counter()
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = f"POST {target.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in target.headers.items())
        head += f"Content-Length: {len(body)}\r\n\r\n"
        self.sock.sendall(head.encode() + body)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self._recv()
        header, _, buf = buf.partition(b"\r\n\r\n")
        if not header.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{target.name}: {header[:200]!r}")
        if b"chunked" not in header.lower():
            raise RuntimeError(f"{target.name}: not a chunked stream: {header[:300]!r}")
        first, tokens, text, done = None, 0, b"", False
        while not done:
            while True:  # every complete chunk in the buffer
                eol = buf.find(b"\r\n")
                if eol < 0:
                    break
                size = int(buf[:eol].split(b";")[0], 16)
                if size == 0:
                    done = True
                    break
                if len(buf) < eol + 2 + size + 2:
                    break
                text += buf[eol + 2 : eol + 2 + size]
                buf = buf[eol + 2 + size + 2 :]
            events = text.split(b"\n\n")
            text = events.pop()  # an incomplete event waits for the rest
            for event in events:
                if not event.startswith(b"data: ") or event.startswith(b"data: [DONE]"):
                    continue
                if first is None:
                    first = time.perf_counter()
                if b'"text":""' not in event.replace(b" ", b""):
                    tokens += 1
            if not done:
                buf += self._recv()
        ended = time.perf_counter()
        if target.fresh:
            self.close()  # the server closes its end after a stream
        return {
            "ttft_ms": ((first or ended) - started) * 1000,
            "latency_ms": (ended - started) * 1000,
            "tokens": tokens,
        }


def run_round(target: Target, *, clients: int, requests: int, max_tokens: int) -> dict:
    """`requests` streaming completions from `clients` threads; wall time and per request."""
    results: list[dict] = []
    errors: list[str] = []
    counter = iter(range(requests))
    lock = threading.Lock()

    def client() -> None:
        conn = Conn(target.port)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            body = json.dumps(
                {
                    "prompt": PROMPTS[i % len(PROMPTS)],
                    "max_tokens": max_tokens,
                    "stream": True,
                    "ignore_eos": True,
                    "temperature": 0,
                }
            ).encode()
            try:
                results.append(conn.stream(target, body))
            except Exception as exc:  # recorded, the round goes on
                errors.append(f"{type(exc).__name__}: {exc}")
                conn.close()
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"wall_s": time.perf_counter() - started, "results": results, "errors": errors}


def measure(targets: list[Target], *, levels, requests: int, rounds: int, max_tokens: int) -> dict:
    out: dict = {}
    for clients in levels:
        per = {t.name: {"wall_s": 0.0, "results": [], "errors": []} for t in targets}
        for target in targets:  # warm-up: connections, the engine's first batches
            run_round(target, clients=clients, requests=clients, max_tokens=max_tokens)
        for r in range(rounds):
            order = targets if r % 2 == 0 else list(reversed(targets))
            for target in order:
                got = run_round(
                    target,
                    clients=clients,
                    requests=max(requests, 2 * clients),
                    max_tokens=max_tokens,
                )
                per[target.name]["wall_s"] += got["wall_s"]
                per[target.name]["results"] += got["results"]
                per[target.name]["errors"] += got["errors"]
        for name, got in per.items():
            tokens = sum(x["tokens"] for x in got["results"])
            out[f"{name}_c{clients}"] = {
                "requests": len(got["results"]),
                "errors": len(got["errors"]),
                "error_sample": got["errors"][:3],
                "tokens": tokens,
                "tokens_per_s": round(tokens / got["wall_s"], 1) if got["wall_s"] else 0,
                "ttft_ms": percentiles([x["ttft_ms"] for x in got["results"]]),
                "latency_ms": percentiles([x["latency_ms"] for x in got["results"]]),
            }
        for name, got in out.items():
            if name.endswith(f"_c{clients}"):
                log(
                    f"c={clients} {name.split('_c')[0]}: {got['tokens_per_s']} tok/s, ttft p50 "
                    f"{got['ttft_ms'].get('p50')}, lat p50 {got['latency_ms'].get('p50')} ms, "
                    f"errors {got['errors']}"
                )
                for sample in got["error_sample"]:
                    log(f"  error: {sample}")
    return out


def ratios(measured: dict, levels) -> dict:
    out = {}
    for clients in levels:
        d, g = measured[f"direct_c{clients}"], measured[f"gateway_c{clients}"]
        if not d["requests"] or not g["requests"]:
            continue
        out[f"c{clients}_throughput_gateway_vs_direct"] = round(
            g["tokens_per_s"] / d["tokens_per_s"], 3
        )
        for what in ("latency_ms", "ttft_ms"):
            for q in ("p50", "p95"):
                out[f"c{clients}_{what[:-3]}_{q}_gateway_vs_direct"] = round(
                    g[what][q] / d[what][q], 3
                )
        relay = measured.get(f"relay_c{clients}")
        if relay and relay["requests"]:
            for q in ("p50", "p95"):
                out[f"c{clients}_ttft_{q}_relay_vs_direct"] = round(
                    relay["ttft_ms"][q] / d["ttft_ms"][q], 3
                )
    return out


# -- the gateway's upstream client: httpx's async streaming beside raw asyncio streams ------


async def _raw_stream(host: str, port: int, path: str, headers: dict, body: bytes, state: dict):
    """One streaming request on a kept-alive asyncio connection (HTTP/1.1, chunked answer):
    what the least a proxy in Python can do costs."""
    import asyncio

    started = time.perf_counter()
    if state.get("writer") is None:
        state["reader"], state["writer"] = await asyncio.open_connection(host, port)
    reader, writer = state["reader"], state["writer"]
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    writer.write(head.encode() + body)
    first = None
    header = await reader.readuntil(b"\r\n\r\n")
    assert header.startswith(b"HTTP/1.1 200"), header[:200]
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if first is None and size:
            first = time.perf_counter()
        if size == 0:
            break
    writer.close()  # llama-server closes a connection after a stream
    state["writer"] = None
    return started, first, time.perf_counter(), chunk


async def _httpx_stream(client, url: str, headers: dict, body: bytes):
    started = time.perf_counter()
    first = None
    async with client.stream("POST", url, content=body, headers=headers) as response:
        assert response.status_code == 200
        async for _ in response.aiter_raw():
            if first is None:
                first = time.perf_counter()
    return started, first, time.perf_counter(), None


def upstream_clients(port: int, api_key: str, *, requests: int, max_tokens: int) -> dict:
    """The same sequential streaming requests to the replica with each client; time to the
    first body bytes and this process's CPU per request."""
    import asyncio

    import httpx

    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    headers["Connection"] = "close"  # as the gateway asks for a stream
    body = json.dumps(
        {"prompt": PROMPTS[0], "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    ).encode()
    out = {}

    async def run(name: str) -> None:
        state: dict = {}
        async with httpx.AsyncClient(timeout=60) as client:
            url = f"http://127.0.0.1:{port}/v1/completions"
            took, cpu0 = [], time.process_time()
            for _ in range(requests):
                if name == "raw_asyncio":
                    got = await _raw_stream(
                        "127.0.0.1", port, "/v1/completions", headers, body, state
                    )
                else:
                    got = await _httpx_stream(client, url, headers, body)
                took.append(got)
            cpu = time.process_time() - cpu0
        if state.get("writer") is not None:
            state["writer"].close()
        out[name] = {
            "first_bytes_ms": percentiles([(f - s) * 1000 for s, f, _, _ in took]),
            "latency_ms": percentiles([(e - s) * 1000 for s, _, e, _ in took]),
            "client_cpu_ms_per_request": round(cpu * 1000 / requests, 3),
        }

    for name in ("httpx", "raw_asyncio", "httpx", "raw_asyncio"):  # the second pair counts
        asyncio.run(run(name))
    return out


def environment_again() -> dict:
    from django.db import connection

    connection.close()  # a long run: the server may have dropped the connection meanwhile
    return environment()


def cold_start(deployment, gateway: Target, engine: Proc, model: Path, logdir: Path) -> dict:
    """The deployment scaled to zero (its replica's engine stopped), then one streaming
    request through the gateway: the gateway calls services.wake and holds the request. A
    thread here stands in for the reconciler, without Slurm: when the deployment wants a
    replica again it starts llama-server and registers it READY (routes.publish). Measured:
    the client's time to its first token, and the parts: request -> wake seen, engine
    start -> healthy. (With Slurm and the reconciler the `woken` event's cold_start_s adds
    scheduling and the reconciler's period: tests/serving/test_gateway_e2e.py.)"""
    from apps.serving import keys, routes
    from apps.serving.models import Deployment, DeploymentState

    engine.stop()
    Deployment.objects.filter(pk=deployment.pk).update(
        state=DeploymentState.IDLE, replicas_desired=0
    )
    deployment.replicas.all().update(state="STOPPED")
    routes.publish(deployment_id=deployment.pk)
    marks: dict = {}

    def reconciler_stand_in() -> None:
        from django.db import connection

        try:
            while time.perf_counter() - marks["sent"] < 120:
                if Deployment.objects.get(pk=deployment.pk).replicas_desired > 0:
                    break
                time.sleep(0.02)
            marks["woken"] = time.perf_counter()
            _, port = start_engine(
                model, logdir, api_key=keys.engine_key(deployment_id=deployment.pk), slots=4
            )
            marks["healthy"] = time.perf_counter()
            register_replica(deployment, port)
            marks["published"] = time.perf_counter()
        finally:
            connection.close()

    body = json.dumps({"prompt": "Hello", "max_tokens": 8, "stream": True}).encode()
    marks["sent"] = time.perf_counter()
    thread = threading.Thread(target=reconciler_stand_in)
    thread.start()
    got = Conn(gateway.port).stream(gateway, body)
    thread.join()

    def ms(a: str, b: str) -> float:
        return round((marks[b] - marks[a]) * 1000, 1)

    return {
        "first_token_ms": round(got["ttft_ms"], 1),
        "latency_ms": round(got["latency_ms"], 1),
        "request_to_wake_ms": ms("sent", "woken"),
        "engine_start_to_healthy_ms": ms("woken", "healthy"),
        "published_to_first_token_ms": round(
            got["ttft_ms"] - (marks["published"] - marks["sent"]) * 1000, 1
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per round")
    parser.add_argument("--requests", type=int, help="requests per round and path")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per path (alternating)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--slots", type=int, default=4, help="the replica's parallel slots")
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    parser.add_argument("--keep-logs", action="store_true")
    args, unknown = parser.parse_known_args()  # run_all passes its arguments to every script
    if unknown:
        log(f"ignoring arguments meant for other benchmarks: {' '.join(unknown)}")
    requests = args.requests or (16 if args.quick else 32)
    rounds = args.rounds
    logdir = Path(tempfile.mkdtemp(prefix="torus-bench-serving-"))

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result = None
    try:
        manage("migrate", "--noinput", "--verbosity", "0")
        django_setup()
        from apps.serving import keys

        env_start = environment()
        world, deployment = fixture(slots=args.slots, max_tokens=args.max_tokens)
        model = make_model(logdir)
        engine, engine_port = start_engine(
            model, logdir, api_key=keys.engine_key(deployment_id=deployment.pk), slots=args.slots
        )
        replica = register_replica(deployment, engine_port)
        web, web_port = start_web(logdir, workers=1)
        _, relay_port = start_relay(engine_port, logdir, mode="tcp", check="/health")
        log(f"replica :{engine_port}, gateway :{web_port}, relay :{relay_port}")
        targets = [
            Target(
                "direct",
                engine_port,
                "/v1/completions",
                keys.engine_key(deployment_id=deployment.pk),
                fresh=True,
            ),
            Target("gateway", web_port, f"/serve/{deployment.pk}/v1/completions", world["token"]),
            Target(
                "relay",
                relay_port,
                "/v1/completions",
                keys.engine_key(deployment_id=deployment.pk),
                fresh=True,
            ),
        ]
        cpu_before = {"engine": process_cpu_seconds(engine.popen.pid)}
        cpu_before["web"] = process_cpu_seconds(web.popen.pid)
        levels = [int(c) for c in args.concurrency.split(",")]
        measured = measure(
            targets, levels=levels, requests=requests, rounds=rounds, max_tokens=args.max_tokens
        )
        cpu = {
            "engine_cpu_s": round(process_cpu_seconds(engine.popen.pid) - cpu_before["engine"], 1),
            "gateway_cpu_s": round(process_cpu_seconds(web.popen.pid) - cpu_before["web"], 1),
        }
        time.sleep(2)  # the gateway's records of the last requests are written
        from apps.serving.models import ServingRequest

        rows = ServingRequest.objects.filter(deployment=deployment, status=200)
        recorded = {
            "requests": rows.count(),
            "ttft_ms": percentiles([r for r in rows.values_list("ttft_ms", flat=True) if r]),
            "latency_ms": percentiles(list(rows.values_list("latency_ms", flat=True))),
        }
        log(f"the gateway's own records: {json.dumps(recorded)}")
        log("upstream clients: httpx beside raw asyncio, sequential, to the replica")
        upstream = upstream_clients(
            engine_port,
            keys.engine_key(deployment_id=deployment.pk),
            requests=max(20, requests),
            max_tokens=args.max_tokens,
        )
        log("cold start: the deployment scaled to zero, one request through the gateway")
        cold = cold_start(deployment, targets[1], engine, model, logdir)
        log(f"cold start: {json.dumps(cold)}")
        gateway_requests = sum(measured[f"gateway_c{c}"]["requests"] for c in levels)
        cpu["gateway_cpu_ms_per_request"] = round(
            cpu["gateway_cpu_s"] * 1000 / max(1, gateway_requests + sum(levels)), 2
        )
        result = {
            "benchmark": "serving",
            "metrics": {
                **{f"gateway_c{c}": measured[f"gateway_c{c}"] for c in levels},
                **cpu,
                "upstream_client": upstream,
                "cold_start": cold,
                "gateway_recorded": recorded,
                "requests_per_round": requests,
                "rounds": rounds,
                "max_tokens": args.max_tokens,
                "slots": args.slots,
                "replica": str(replica.pk),
                "environment_start": env_start,
                "environment_end": environment_again(),
            },
            "peers": {
                **{f"direct_c{c}": measured[f"direct_c{c}"] for c in levels},
                **{f"relay_c{c}": measured[f"relay_c{c}"] for c in levels},
            },
            "ratios": {
                **ratios(measured, levels),
                "upstream_first_bytes_p50_httpx_vs_raw_asyncio": round(
                    upstream["httpx"]["first_bytes_ms"]["p50"]
                    / upstream["raw_asyncio"]["first_bytes_ms"]["p50"],
                    3,
                ),
            },
        }
        log(f"ratios (gateway over direct): {json.dumps(result['ratios'])}")
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        stop_all()
    return finish("serving", result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
