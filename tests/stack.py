"""The portal's own processes, N of each, as `TORUS_SCALE=N scripts/portal start` runs them
but on the test database and the tests' Redis: web servers behind the real HAProxy
(scripts/web-proxy), Celery workers and beats, log shippers. Each can be SIGKILLed and
started again by name."""

import os
import random
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port nothing listens on, never handed out twice here, and below the kernel's
    ephemeral range: an outgoing connection's local port cannot take it between this check
    and the server's bind (a CI run lost a web server so: "address already in use")."""
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    ephemeral = int(text.split()[0])
    for _ in range(500):
        port = random.randrange(21000, max(21001, ephemeral))
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


def portal_env(**extra: str) -> dict:
    """The environment of a portal process on the test database and the tests' Redis."""
    db = connection.settings_dict
    return {
        **os.environ,
        "TORUS_DATABASE_URL": (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        ),
        "TORUS_REDIS_DB_BASE": str(settings.REDIS_DB_BASE),
        "TORUS_JOB_ROOT": settings.TORUS_JOB_ROOT,
        "TORUS_TLS": "1",
        **extra,
    }


class Stack:
    """`kinds`: which of web, worker, beat, shipper to run, `scale` of each; web servers
    always come with the proxy in front. `base` is the HTTPS URL, `verify` trusts its
    certificate."""

    def __init__(self, *, tmp: Path, env: dict, scale: int = 2, kinds=("web",)) -> None:
        self.tmp, self.env, self.procs = tmp, env, {}
        self.commands: dict[str, list] = {}
        uvicorn = [BIN / "uvicorn", "config.asgi:application", "--no-access-log"]
        uvicorn += ["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]
        self.web_ports = []
        for n in range(1, scale + 1):
            if "web" in kinds:
                self.web_ports.append(free_port())
                self.commands[f"web{n}"] = [*uvicorn, "--port", str(self.web_ports[-1])]
            if "worker" in kinds:
                self.commands[f"worker{n}"] = [BIN / "celery", "-A", "config", "worker"]
                self.commands[f"worker{n}"] += ["--concurrency", "2", "-n", f"worker{n}@%h"]
            if "beat" in kinds:
                schedule = tmp / f"celerybeat-schedule{n}"
                self.commands[f"beat{n}"] = [BIN / "celery", "-A", "config", "beat"]
                self.commands[f"beat{n}"] += ["--schedule", schedule]
            if "shipper" in kinds:
                self.commands[f"shipper{n}"] = [BIN / "python", "manage.py", "run_shipper"]
        self.http, self.https = free_port(), free_port()
        self.base = f"https://127.0.0.1:{self.https}"
        if self.web_ports:
            addrs = [f"127.0.0.1:{port}" for port in [self.http, self.https, *self.web_ports]]
            subprocess.run(
                [ROOT / "scripts/web-proxy", "render", tmp, *addrs],
                check=True,
                capture_output=True,
                env=env,
            )
            self.commands["proxy"] = ["haproxy", "-db", "-f", tmp / "haproxy.cfg"]
        self.verify = ssl.create_default_context(cafile=str(tmp / "site.pem.crt"))

    def start(self, name: str) -> None:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115  (the child holds it)
        self.procs[name] = subprocess.Popen(
            self.commands[name],
            cwd=ROOT,
            env=self.env,
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def __enter__(self) -> "Stack":
        try:
            for name in self.commands:
                self.start(name)
            deadline = time.monotonic() + 60
            for port in self.web_ports:
                wait_answer(f"http://127.0.0.1:{port}/healthz", verify=True, deadline=deadline)
            if self.web_ports:
                self._wait_proxy_serves_all(deadline=deadline)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_proxy_serves_all(self, *, deadline: float) -> None:
        """Until the proxy's health checks have every server up: requests reach each of them."""
        expected = {f"web{n}" for n in range(1, len(self.web_ports) + 1)}
        seen: set[str] = set()
        while seen != expected:
            try:
                answer = httpx.get(f"{self.base}/healthz", verify=self.verify, timeout=2)
                seen.add(answer.headers.get("x-torus-server", ""))
            except httpx.HTTPError:
                pass
            seen &= expected
            assert time.monotonic() < deadline, f"the proxy reached only {sorted(seen)}"
            time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        for name in self.procs:
            self.kill(name)


def wait_answer(url: str, *, verify, deadline: float) -> None:
    while True:
        try:
            if httpx.get(url, verify=verify, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.2)
