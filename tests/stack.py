"""The portal's own processes, N of each, as `TORUS_SCALE=N scripts/portal start` runs them
but on the test database and the tests' Redis: web servers behind the real HAProxy
(scripts/web-proxy), Celery workers and beats, log shippers, started by scripts/devstack.py
from its commands. Each can be SIGKILLed and started again by name."""

import os
import ssl
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

from scripts import devstack
from scripts.devstack import free_port

ROOT = Path(__file__).resolve().parents[1]


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
        self.web_ports = []
        for n in range(1, scale + 1):
            if "web" in kinds:
                self.web_ports.append(free_port())
                self.commands[f"web{n}"] = devstack.web_command(
                    port=self.web_ports[-1], proxied=True
                )
            if "worker" in kinds:
                self.commands[f"worker{n}"] = devstack.worker_command(hostname=f"worker{n}@%h")
            if "beat" in kinds:
                schedule = tmp / f"celerybeat-schedule{n}"
                self.commands[f"beat{n}"] = devstack.beat_command(schedule=schedule)
            if "shipper" in kinds:
                self.commands[f"shipper{n}"] = devstack.shipper_command()
        self.http, self.https = free_port(), free_port()
        self.base = f"https://127.0.0.1:{self.https}"
        if self.web_ports:
            addrs = [f"127.0.0.1:{port}" for port in [self.http, self.https, *self.web_ports]]
            devstack.render_proxy(tmp, addrs, env=env)
            self.commands["proxy"] = devstack.proxy_command(config=tmp / "haproxy.cfg")
        self.verify = ssl.create_default_context(cafile=str(tmp / "site.pem.crt"))

    def start(self, name: str) -> None:
        self.procs[name] = devstack.Proc(name, self.commands[name], self.tmp, env=self.env)

    def kill(self, name: str) -> None:
        self.procs[name].kill()

    def __enter__(self) -> "Stack":
        try:
            for name in self.commands:
                self.start(name)
            deadline = time.monotonic() + 60
            for port in self.web_ports:
                url = f"http://127.0.0.1:{port}/healthz"
                devstack.wait_answering(url, timeout=deadline - time.monotonic(), interval=0.2)
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
