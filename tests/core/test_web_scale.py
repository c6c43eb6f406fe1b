"""Two ASGI servers behind the real HAProxy (scripts/web-proxy, as `TORUS_SCALE=2 make up` runs
them): TLS ends at the proxy, plain HTTP is redirected, cookies are secure and HSTS is on;
requests reach both servers, and all of them still succeed after one is SIGKILLed; a websocket
works whichever server it lands on (Channels' Redis layer); `check --deploy` is clean."""

import asyncio
import http.client
import json
import os
import select
import subprocess
import sys
import time

import httpx
import pytest
import websockets
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from apps.compute.doctor import PROC_CHECK_ID, proc_problem
from apps.logs.live import publish_lines
from apps.tenancy.models import Role
from tests.factories import PASSWORD, make_running_attempt
from tests.stack import ROOT, Stack, portal_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stack(tmp_path):
    """Two uvicorn processes on the test database and HAProxy in front of them."""
    with Stack(tmp=tmp_path, env=portal_env(), scale=2, kinds=("web",)) as stack:
        yield stack


def test_tls_at_the_proxy_both_servers_and_one_lost(stack, acme):
    base, verify = stack.base, stack.verify
    plain = httpx.get(f"http://127.0.0.1:{stack.http}/api/v1/auth/me?x=1")
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

        stack.kill("web1")  # SIGKILL: lost, not stopped
        after = [api.get("/api/v1/auth/me") for _ in range(30)]
        assert [r.status_code for r in after] == [200] * 30
        assert {r.headers["x-torus-server"] for r in after} == {"web2"}


def test_an_idle_client_connection_is_kept_past_the_request_timeout(stack, acme):
    """A pipeline that waits 12 s between submits (over HAProxy's 10 s request timeout) finds
    its connection open: a proxy that closed it just as the POST went out would lose the
    POST's answer, and a client may not send a POST twice."""
    conn = http.client.HTTPSConnection("127.0.0.1", stack.https, context=stack.verify)
    bearer = {"Authorization": f"Bearer {acme.tokens[Role.MEMBER]}"}
    conn.request("GET", "/api/v1/auth/me", headers=bearer)
    first = conn.getresponse()
    first.read()
    assert first.status == 200
    sock = conn.sock
    time.sleep(12)
    closed = select.select([sock], [], [], 0)[0]  # readable at rest: the proxy's EOF
    assert not closed, "the proxy closed an idle keep-alive connection after under 12 s"
    conn.request("GET", "/api/v1/auth/me", headers=bearer)
    again = conn.getresponse()
    assert again.status == 200 and conn.sock is sock
    conn.close()


def test_a_websocket_works_on_either_server(stack, acme, cluster, logs_dir):
    job = make_running_attempt(world=acme, cluster=cluster, directory=logs_dir).job
    url = f"wss://127.0.0.1:{stack.https}/ws/jobs/{job.pk}/?tail=0"
    headers = {"Authorization": f"Bearer {acme.tokens[Role.VIEWER]}"}
    origin = stack.base

    async def follow() -> dict[str, str]:
        sockets = {}
        for _ in range(10):  # least connections: the next socket lands on the other server
            ws = await websockets.connect(
                url, ssl=stack.verify, additional_headers=headers, origin=origin
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
    if proc_problem(proc="/proc") is None:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "no issues" in done.stdout
    else:  # this machine runs jobs beside the portal and its /proc has no hidepid
        assert "identified 1 issue" in done.stderr, done.stdout + done.stderr
        assert PROC_CHECK_ID in done.stderr
