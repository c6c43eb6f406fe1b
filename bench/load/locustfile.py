"""Locust load test: researchers and pipelines of two tenants against a running Torus.

Run it through bench/load/run.py (which seeds, runs locust headless, cleans up and writes the
report); alone it also works:

    .venv/bin/locust -f bench/load/locustfile.py --host https://127.0.0.1:8443 \
        --headless -u 200 -r 20 -t 3m

Locust monkey-patches with gevent: this file runs in locust's own process and never imports
Django. It reads the context run.py wrote (LOAD_CONTEXT, a JSON file); without one it prepares
its own at test start (seed jobs, live jobs) and cancels the run's jobs at test stop.

Users (weights 9:1):
- Researcher: a token of acme or globex (owner, admin, member or viewer, round-robin); browses
  the project's jobs (list, next page, a state filter), a job's detail, its metrics and its
  log file, searches the logs, follows a job over the websocket for 3-6 s, and now and then
  (not a viewer) submits a `sleep 1` job. 2-10 s between actions.
- Pipeline: a member's or admin's token; submits a `sleep 1` job, polls it every 2 s until it
  is over, waits 5-15 s, again.

Every request is named by its endpoint template. The websocket's connect + first message
(the backlog) is reported as "WS /ws/jobs/{id}/?tail=100 (connect+backlog)"; a socket that
breaks afterwards as "WS /ws/jobs/{id}/ (follow)". A pipeline's job from submit to its end is
"JOB submit -> terminal (pipeline)" (not a request; not counted as a read).
With LOAD_SAMPLES set, every sample (time, type, name, ms, error) is written there at the end.
"""

import itertools
import json
import os
import random
import socket
import sys
import time
import urllib.parse
from pathlib import Path

import gevent
from locust import FastHttpUser, between, events, task  # gevent's monkey-patching happens here

sys.path.insert(0, str(Path(__file__).resolve().parent))
# after locust, so that websocket-client's sockets are gevent's
import _api
import websocket

SUBMIT = "POST /api/v1/jobs/ (submit)"
LIST = "GET /api/v1/jobs/?project="
LIST_NEXT = "GET /api/v1/jobs/?project=&cursor= (next page)"
LIST_STATE = "GET /api/v1/jobs/?project=&state="
DETAIL = "GET /api/v1/jobs/{id}/"
POLL = "GET /api/v1/jobs/{id}/ (pipeline poll)"
METRICS = "GET /api/v1/jobs/{id}/metrics/"
LOGS = "GET /api/v1/jobs/{id}/logs/"
SEARCH = "GET /api/v1/logs/search/?q=&project="
WS_CONNECT = "WS /ws/jobs/{id}/?tail=100 (connect+backlog)"
WS_FOLLOW = "WS /ws/jobs/{id}/ (follow)"
TURNAROUND = "JOB submit -> terminal (pipeline)"
QUERIES = ["loss", "epoch", "NCCL WARN", "checkpoint", "throughput", "grad_norm", "live step"]

CONTEXT: dict = {}
SAMPLES: list = []
WS_STATS = {"sockets": 0, "messages": 0, "lines": 0, "live_messages": 0, "closed_by_server": 0}
# the connect+backlog time in three parts: TCP + TLS to HAProxy; the upgrade (the request to
# the 101: authentication, the job's visibility, accept); the first message (joining the
# job's group, the access watch, the backlog read from Elasticsearch)
WS_PHASES: dict[str, list] = {"tcp_tls_ms": [], "upgrade_ms": [], "backlog_ms": []}
SUBMITTED = {"researcher": 0, "pipeline": 0}
_researcher_seats = itertools.count()
_pipeline_seats = itertools.count()
_prepared_here = False


@events.test_start.add_listener
def _test_start(environment, **_kwargs):
    global _prepared_here
    path = os.environ.get("LOAD_CONTEXT")
    if path:
        CONTEXT.update(json.loads(Path(path).read_text()))
    else:  # run alone: seed and start live jobs ourselves
        run_id = time.strftime("%Y%m%d-%H%M%S")
        seconds = int(getattr(environment.parsed_options, "run_time", None) or 600) + 60
        CONTEXT.update(_api.prepare(run_id, live_seconds=seconds))
        _prepared_here = True


@events.request.add_listener
def _sample(request_type, name, response_time, exception=None, **_kwargs):
    error = None if exception is None else f"{type(exception).__name__}: {exception}"[:300]
    SAMPLES.append((time.time(), request_type, name, round(response_time, 2), error))


@events.test_stop.add_listener
def _test_stop(environment, **_kwargs):
    out = os.environ.get("LOAD_SAMPLES")
    if out:
        Path(out).write_text(
            json.dumps(
                {
                    "samples": SAMPLES,
                    "websocket": WS_STATS,
                    "websocket_phases": WS_PHASES,
                    "submitted": SUBMITTED,
                }
            )
        )
    if _prepared_here:
        _api.log(f"cleanup: {_api.cleanup(CONTEXT)}")


def _seat(counter, roles):
    """Spread users over the tenants and the given roles, round-robin."""
    n = next(counter)
    tenants = CONTEXT["tenants"]
    tenant = tenants[n % len(tenants)]
    role = roles[(n // len(tenants)) % len(roles)]
    return tenant, role


class _TorusUser(FastHttpUser):
    abstract = True
    insecure = False
    # verify the proxy's self-signed certificate rather than skip verification
    ssl_context_factory = staticmethod(lambda **_kw: _ssl_context())
    network_timeout = 30.0
    connection_timeout = 10.0

    def _headers(self):
        return {"Authorization": f"Bearer {self.token}"}

    def _get(self, path, name, **params):
        with self.client.get(
            path, params=params or None, headers=self._headers(), name=name, catch_response=True
        ) as response:
            if response.status_code != 200:
                response.failure(_why(response))
                return None
            try:
                return response.json()
            except ValueError as exc:
                response.failure(f"not JSON: {exc}")
                return None

    def _submit(self, who: str, poll: bool = False):
        run = CONTEXT["run_id"]
        spec = {
            "project": self.project,
            "name": f"load-{who}-{random.randrange(10**6)}",  # noqa: S311
            "command": ["sleep", "1"],
            "labels": {_api.RUN_LABEL: run, "load-user": who},
            "resources": {"gpus_per_node": 0, "time_limit": 1},
        }
        with self.client.post(
            "/api/v1/jobs/", json=spec, headers=self._headers(), name=SUBMIT, catch_response=True
        ) as response:
            if response.status_code != 201:
                response.failure(_why(response))
                return None
            SUBMITTED[who] += 1
            return response.json()


def _why(response) -> str:
    """A failed request's status and body, or (status 0: no response) the client's error."""
    if response.status_code == 0:
        return f"0: {response.error!r}"
    return f"{response.status_code}: {(response.text or '')[:200]}"


def _ssl_context():
    import gevent.ssl

    return gevent.ssl.create_default_context(cafile=CONTEXT.get("ca", _api.CA))


class Researcher(_TorusUser):
    weight = 9
    wait_time = between(2, 10)

    def on_start(self):
        self.tenant, self.role = _seat(_researcher_seats, ["member", "admin", "owner", "viewer"])
        self.token = self.tenant["tokens"][self.role]
        self.project = self.tenant["project"]
        self.seen: list[dict] = []
        self.next_page = None
        self.browse()

    def _pick(self, finished_only: bool = False):
        pool = [j for j in self.seen if not finished_only or j["state"] in _api.TERMINAL]
        if pool and random.random() < 0.7:  # noqa: S311
            return random.choice(pool)["id"]  # noqa: S311
        return random.choice(self.tenant["seed_jobs"] or self.tenant["live_jobs"])  # noqa: S311

    @task(6)
    def browse(self):
        page = self._get("/api/v1/jobs/", LIST, project=self.project, page_size=20)
        if page:
            self.seen = page["results"] or self.seen
            self.next_page = page["next"]

    @task(2)
    def browse_next(self):
        if not self.next_page:
            return self.browse()
        page = self._get(self.next_page, LIST_NEXT)
        if page:
            self.seen = page["results"] or self.seen
            self.next_page = page["next"]

    @task(1)
    def browse_state(self):
        state = random.choice(["RUNNING", "SUCCEEDED", "FAILED,CANCELLED", "QUEUED,SUBMITTED"])  # noqa: S311
        self._get("/api/v1/jobs/", LIST_STATE, project=self.project, state=state, page_size=20)

    @task(4)
    def detail(self):
        self._get(f"/api/v1/jobs/{self._pick()}/", DETAIL)

    @task(3)
    def metrics(self):
        job = random.choice(self.tenant["seed_jobs"] + self.tenant["live_jobs"])  # noqa: S311
        self._get(f"/api/v1/jobs/{job}/metrics/", METRICS, metric="loss")

    @task(1)
    def log_file(self):
        self._get(f"/api/v1/jobs/{self._pick(finished_only=True)}/logs/", LOGS, limit=65536)

    @task(3)
    def search(self):
        query = random.choice(QUERIES)  # noqa: S311
        self._get("/api/v1/logs/search/", SEARCH, q=query, project=self.project, size=50)

    @task(2)
    def follow(self):
        live = self.tenant["live_jobs"]
        job = random.choice(live) if live and random.random() < 0.6 else self._pick()  # noqa: S311
        follow_websocket(self.environment, self.host, self.token, job, random.uniform(3, 6))  # noqa: S311

    @task(1)
    def submit(self):
        if self.role != "viewer":
            self._submit("researcher")


class Pipeline(_TorusUser):
    weight = 1
    wait_time = between(5, 15)

    def on_start(self):
        self.tenant, self.role = _seat(_pipeline_seats, ["member", "admin"])
        self.token = self.tenant["tokens"][self.role]
        self.project = self.tenant["project"]

    @task
    def run_one(self):
        start = time.perf_counter()
        job = self._submit("pipeline")
        if not job:
            return
        state, reason, deadline = job["state"], "", time.monotonic() + 180
        while state not in _api.TERMINAL and time.monotonic() < deadline:
            gevent.sleep(2)
            detail = self._get(f"/api/v1/jobs/{job['id']}/", POLL)
            if detail:
                state, reason = detail["state"], detail["state_reason"]
        ms = (time.perf_counter() - start) * 1000
        error = None
        if state != "SUCCEEDED":  # not an HTTP error: reported apart (run.py)
            error = RuntimeError(f"job ended {state} ({reason}) or not within 180 s")
        events.request.fire(
            request_type="JOB",
            name=TURNAROUND,
            response_time=ms,
            response_length=0,
            exception=error,
            context={},
        )


def follow_websocket(environment, host: str, token: str, job: str, seconds: float) -> None:
    """Connect, time the first message (the backlog), then read for `seconds`."""
    parts = urllib.parse.urlsplit(host)
    scheme = "wss" if parts.scheme == "https" else "ws"
    url = f"{scheme}://{parts.netloc}/ws/jobs/{job}/?tail=100"
    start = time.perf_counter()
    sock = ws = None
    try:
        # our own TCP + TLS socket, so that the handshake's phases can be timed apart
        sock = socket.create_connection((parts.hostname, parts.port or 443), timeout=10)
        if scheme == "wss":
            sock = _ssl_context().wrap_socket(sock, server_hostname=parts.hostname)
        connected = time.perf_counter()
        ws = websocket.create_connection(
            url, socket=sock, header=[f"Authorization: Bearer {token}"], timeout=10
        )
        upgraded = time.perf_counter()
        first = json.loads(ws.recv())
        if first.get("type") != "backlog":
            raise RuntimeError(f"first message is {first.get('type')!r}, not the backlog")
    except Exception as exc:  # reported to Locust as this endpoint's failure
        _fire(environment, WS_CONNECT, start, exc)
        if ws is not None:
            ws.close()
        elif sock is not None:
            sock.close()
        return
    _fire(environment, WS_CONNECT, start, None, length=len(first.get("lines", [])))
    now = time.perf_counter()
    WS_PHASES["tcp_tls_ms"].append(round((connected - start) * 1000, 2))
    WS_PHASES["upgrade_ms"].append(round((upgraded - connected) * 1000, 2))
    WS_PHASES["backlog_ms"].append(round((now - upgraded) * 1000, 2))
    WS_STATS["sockets"] += 1
    WS_STATS["messages"] += 1
    WS_STATS["lines"] += len(first.get("lines", []))
    end = time.monotonic() + seconds
    follow_start = time.perf_counter()
    try:
        while (left := end - time.monotonic()) > 0:
            ws.settimeout(left)
            try:
                raw = ws.recv()
            except websocket.WebSocketTimeoutException:
                break
            if not raw:  # closed by the server, normally
                WS_STATS["closed_by_server"] += 1
                break
            message = json.loads(raw)
            WS_STATS["messages"] += 1
            if message.get("type") == "lines":
                WS_STATS["live_messages"] += 1
                WS_STATS["lines"] += len(message.get("lines", []))
    except websocket.WebSocketConnectionClosedException:
        WS_STATS["closed_by_server"] += 1
    except Exception as exc:
        _fire(environment, WS_FOLLOW, follow_start, exc)
    finally:
        ws.close()


def _fire(environment, name, start, exc, length=0):
    environment.events.request.fire(
        request_type="WS",
        name=name,
        response_time=(time.perf_counter() - start) * 1000,
        response_length=length,
        exception=exc,
        context={},
    )
