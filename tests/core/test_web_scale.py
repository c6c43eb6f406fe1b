"""Two ASGI servers behind the real HAProxy (scripts/web-proxy, as `TORUS_SCALE=2 make up` runs
them): TLS ends at the proxy, plain HTTP is redirected, cookies are secure and HSTS is on;
requests reach both servers, and all of them still succeed after one is SIGKILLed; a websocket
works whichever server it lands on (Channels' Redis layer); `check --deploy` is clean."""

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time

import httpx
import pytest
import websockets
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from apps.jobs.models import JobAttempt
from apps.logs.live import publish_lines
from apps.tenancy.models import Role
from tests.factories import PASSWORD, make_job
from tests.logs.test_shipper import ROOT, _shipper_env

pytestmark = pytest.mark.django_db(transaction=True)
UVICORN = [ROOT / ".venv/bin/uvicorn", "config.asgi:application", "--no-access-log"]
UVICORN += ["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, *, verify, deadline: float) -> None:
    while True:
        try:
            if httpx.get(url, verify=verify, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.2)


@pytest.fixture
def stack(tmp_path):
    """Two uvicorn processes on the test database and HAProxy in front of them."""
    env = {**_shipper_env(), "TORUS_TLS": "1"}
    servers = [_free_port(), _free_port()]
    http, https = _free_port(), _free_port()
    procs = {}
    try:
        for n, port in enumerate(servers, 1):
            procs[f"web{n}"] = subprocess.Popen(
                [*UVICORN, "--port", str(port)],
                cwd=ROOT,
                env=env,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        addrs = [f"127.0.0.1:{port}" for port in [https, *servers]]
        subprocess.run(
            [ROOT / "scripts/web-proxy", "render", tmp_path, f"127.0.0.1:{http}", *addrs],
            check=True,
            capture_output=True,
            env=env,
        )
        procs["proxy"] = subprocess.Popen(
            ["haproxy", "-db", "-f", tmp_path / "haproxy.cfg"],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        verify = ssl.create_default_context(cafile=str(tmp_path / "site.pem.crt"))
        deadline = time.monotonic() + 60
        for port in servers:
            _wait(f"http://127.0.0.1:{port}/healthz", verify=True, deadline=deadline)
        _wait(f"https://127.0.0.1:{https}/healthz", verify=verify, deadline=deadline)
        yield {"http": http, "https": https, "procs": procs, "verify": verify}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_tls_at_the_proxy_both_servers_and_one_lost(stack, acme):
    base, verify = f"https://127.0.0.1:{stack['https']}", stack["verify"]
    plain = httpx.get(f"http://127.0.0.1:{stack['http']}/api/v1/auth/me?x=1")
    assert plain.status_code == 301
    assert plain.headers["location"] == f"{base}/api/v1/auth/me?x=1"

    member = acme.users[Role.MEMBER]  # a hash the servers check (the tests' own is MD5)
    member.password = PBKDF2PasswordHasher().encode(PASSWORD, "drill-salt")
    member.save(update_fields=["password"])
    with httpx.Client(base_url=base, verify=verify) as browser:
        token = browser.get("/api/v1/auth/csrf").json()["csrf_token"]
        signed_in = browser.post(
            "/api/v1/auth/login",
            json={"username": "acme-member", "password": PASSWORD},
            headers={"X-CSRFToken": token, "Referer": f"{base}/"},
        )
        assert signed_in.status_code == 200, signed_in.text
        cookies = signed_in.headers.get_list("set-cookie")
        assert {c.split("=")[0] for c in cookies} >= {"sessionid", "csrftoken"}
        assert all("; secure" in c.lower() for c in cookies), cookies
        assert signed_in.headers["strict-transport-security"].startswith("max-age=31536000")
        assert browser.get("/api/v1/auth/me").json()["user"]["username"] == "acme-member"

    bearer = {"Authorization": f"Bearer {acme.tokens[Role.MEMBER]}"}
    with httpx.Client(base_url=base, verify=verify, headers=bearer) as api:
        served = [api.get("/api/v1/auth/me") for _ in range(10)]
        assert all(r.status_code == 200 for r in served)
        assert {r.headers["x-torus-server"] for r in served} == {"web1", "web2"}

        os.killpg(stack["procs"]["web1"].pid, signal.SIGKILL)  # lost, not stopped
        stack["procs"]["web1"].wait()
        after = [api.get("/api/v1/auth/me") for _ in range(30)]
        assert [r.status_code for r in after] == [200] * 30
        assert {r.headers["x-torus-server"] for r in after} == {"web2"}


def test_a_websocket_works_on_either_server(stack, acme, cluster, tmp_path):
    job = make_job(
        project=acme.project, user=acme.users[Role.MEMBER], state="RUNNING", cluster=cluster
    )
    JobAttempt.objects.create(
        job=job,
        number=1,
        state="RUNNING",
        nodes=["n1"],
        stdout_path=str(tmp_path / "out"),
        stderr_path=str(tmp_path / "err"),
    )
    url = f"wss://127.0.0.1:{stack['https']}/ws/jobs/{job.pk}/?tail=0"
    headers = {"Authorization": f"Bearer {acme.tokens[Role.VIEWER]}"}
    origin = f"https://127.0.0.1:{stack['https']}"

    async def follow() -> dict[str, str]:
        sockets = {}
        for _ in range(10):  # least connections: the next socket lands on the other server
            ws = await websockets.connect(
                url, ssl=stack["verify"], additional_headers=headers, origin=origin
            )
            server = ws.response.headers["x-torus-server"]
            if server in sockets:
                await ws.close()
            else:
                sockets[server] = ws
                assert json.loads(await ws.recv())["type"] == "backlog"
            if len(sockets) == 2:
                break
        assert set(sockets) == {"web1", "web2"}
        line = {"message": "through the proxy", "stream": "stdout", "offset": 0}
        await asyncio.to_thread(publish_lines, job_id=job.pk, lines=[line])
        got = {}
        for server, ws in sockets.items():
            while server not in got:
                message = json.loads(await asyncio.wait_for(ws.recv(), timeout=10))
                if message["type"] == "lines":
                    got[server] = message["lines"][0]["message"]
            await ws.close()
        return got

    assert asyncio.run(follow()) == {"web1": "through the proxy", "web2": "through the proxy"}


def test_check_deploy_is_clean_in_the_tls_profile():
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**os.environ, "TORUS_TLS": "1"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
