"""The portal's processes: how each is started (the one table of their command lines), and
starting, waiting for, killing and stopping them for scripts/portal, tests/stack.py and bench/.

scripts/portal reads its process table from `python -m scripts.devstack portal-table` and
keeps the pid files, the `torus` account and the logs in .var; the tests run the same commands
on the test database and the tests' Redis (tests/stack.py: portal_env); the benchmarks on
their own Redis databases (bench/_common.py: platform_env). Nothing in apps/ imports this module.
"""

import argparse
import contextlib
import http.client
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"


# -- ports ----------------------------------------------------------------------------------

_HANDED_OUT: set[int] = set()
# The band the portal's own servers and relays take ports from: below the kernel's ephemeral
# range (an outgoing connection's local port cannot take one between the check and the
# server's bind: a CI run lost a web server so) and below the band a Slurm job's rendezvous
# port comes from (22000-31999, apps/compute/backends/launcher.sh).
PORTAL_PORTS = range(21000, 22000)


def free_port() -> int:
    """A port of PORTAL_PORTS nothing listens on, never handed out twice here."""
    for _ in range(500):
        port = random.choice(PORTAL_PORTS)  # noqa: S311 (not a secret)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {PORTAL_PORTS}")


# -- the command of each process -------------------------------------------------------------


def web_command(
    *,
    port: int,
    host: str = "127.0.0.1",
    proxied: bool = False,
    workers: int = 1,
    log_level: str | None = None,
) -> list[str]:
    """uvicorn serving the portal; `proxied`: behind HAProxy (the client's address and
    scheme from its X-Forwarded-* headers)."""
    argv = [str(BIN / "uvicorn"), "config.asgi:application", "--host", host, "--no-access-log"]
    argv += ["--port", str(port)]
    if proxied:
        argv += ["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]
    if workers > 1:
        argv += ["--workers", str(workers)]
    if log_level:
        argv += ["--log-level", log_level]
    return argv


def worker_command(
    *,
    hostname: str,
    concurrency: int = 2,
    loglevel: str | None = None,
    queues: str | None = None,
) -> list[str]:
    """A Celery worker named `hostname` (%h: the machine's name)."""
    argv = [str(BIN / "celery"), "-A", "config", "worker"]
    if loglevel:
        argv += ["--loglevel", loglevel]
    argv += ["--concurrency", str(concurrency)]
    if queues:
        argv += ["-Q", queues]
    return [*argv, "--hostname", hostname]


def beat_command(*, schedule: Path, loglevel: str | None = None) -> list[str]:
    """Celery beat keeping its schedule in `schedule` (several may run: one sends, a lease)."""
    argv = [str(BIN / "celery"), "-A", "config", "beat"]
    if loglevel:
        argv += ["--loglevel", loglevel]
    return [*argv, "--schedule", str(schedule)]


def shipper_command() -> list[str]:
    """The log shipper (several shard the work by leases)."""
    return [str(BIN / "python"), "manage.py", "run_shipper"]


def kubewatch_command() -> list[str]:
    """The Kubernetes watch (reads the platform's Kubernetes token)."""
    return [str(BIN / "python"), "manage.py", "kube_watch"]


def proxy_command(*, config: Path) -> list[str]:
    """HAProxy in the foreground on a configuration scripts/web-proxy rendered."""
    return ["haproxy", "-db", "-f", str(config)]


def render_proxy(directory: Path, addresses: list[str], *, env: dict | None = None) -> None:
    """scripts/web-proxy's configuration and certificate in `directory`: HTTP, HTTPS, then
    the web servers' addresses (host:port)."""
    subprocess.run(  # noqa: S603 (our own script)
        [str(ROOT / "scripts" / "web-proxy"), "render", str(directory), *addresses],
        check=True,
        capture_output=True,
        env=env,
    )


def tier_name(kind: str, n: int) -> str:
    """web, web2, web3 ... as scripts/portal names them (the first has no number)."""
    return kind if n == 1 else f"{kind}{n}"


def portal_table(
    *, scale: int, host: str, port: int, var: Path, concurrency: int
) -> dict[str, list[str]]:
    """What `TORUS_SCALE=scale scripts/portal start` runs, in starting order: web, worker,
    beat, shipper for each n, the proxy in front when scale > 1, then kube_watch."""
    table: dict[str, list[str]] = {}
    for n in range(1, scale + 1):
        table[tier_name("web", n)] = web_command(
            host=host, port=port if scale == 1 else port + n, proxied=scale > 1
        )
        i = "" if n == 1 else str(n)
        table[tier_name("worker", n)] = worker_command(
            hostname=f"worker{i}@%h", concurrency=concurrency, loglevel="INFO"
        )
        schedule = var / "run" / "beat" / f"celerybeat-schedule{i}"
        table[tier_name("beat", n)] = beat_command(schedule=schedule, loglevel="INFO")
        table[tier_name("shipper", n)] = shipper_command()
    if scale > 1:
        table["proxy"] = proxy_command(config=var / "run" / "proxy" / "haproxy.cfg")
    table["kubewatch"] = kubewatch_command()
    return table


# -- environments ----------------------------------------------------------------------------


def platform_env(*, var: Path, redis_db_base: str) -> dict[str, str]:
    """The platform's settings as the Makefile exports them (its secret key read from `var`),
    with Redis databases from `redis_db_base` unless TORUS_REDIS_DB_BASE is set."""
    env = dict(os.environ)
    env.setdefault("TORUS_VAR_DIR", str(var))
    # The database and Redis URLs: config/settings.py reads them from secrets/services.env.
    if not env.get("TORUS_SECRET_KEY"):
        key = var / "secret-key"
        if not key.is_file() or not key.read_text().strip():
            sys.exit(f"no {key}: run `make up` (or make migrate) once first")
        env["TORUS_SECRET_KEY"] = key.read_text().strip()
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["TORUS_REDIS_DB_BASE"] = env.get("TORUS_REDIS_DB_BASE") or redis_db_base
    return env


# -- processes -------------------------------------------------------------------------------

# Prepended to the portal's own processes (not to a peer such as HAProxy) that Proc starts:
# `setpriv ...` to run them as the platform's account, as scripts/portal does.
RUN_AS: list[str] = []


def run_as(user: str) -> None:
    """The portal's processes started from here on run as `user` ("root": as this process)."""
    RUN_AS[:] = [] if user == "root" else ["setpriv", f"--reuid={user}", f"--regid={user}",
                                             "--init-groups", "--"]  # fmt: skip


class Proc:
    """A child process in its own session, its output appended to logdir/<name>.log; `env`
    is its whole environment (default: this process's)."""

    def __init__(self, name: str, argv: list, logdir: Path, env: dict | None = None):
        self.name, self.log_path = name, Path(logdir) / f"{name}.log"
        self.log_file = open(self.log_path, "ab")  # noqa: SIM115 (closed by stop)
        argv = [str(arg) for arg in argv]
        if argv[0].startswith(str(BIN)):  # ours (not a peer such as HAProxy)
            argv = [*RUN_AS, *argv]
        self.popen = subprocess.Popen(  # noqa: S603
            argv,
            cwd=ROOT,
            env=env or dict(os.environ),
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        PROCS.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill(self) -> None:
        """SIGKILL to its whole session at once (a crash, as the fault tests make one)."""
        if self in PROCS:
            PROCS.remove(self)
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        self.log_file.close()

    def stop(self) -> None:
        """SIGTERM to its session, SIGKILL after 15 s and to what is left of the group."""
        if self in PROCS:
            PROCS.remove(self)
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # stragglers of the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        self.log_file.close()

    def tail(self, n: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


PROCS: list[Proc] = []


def stop_all() -> None:
    """Stop every process started here, the last first."""
    while PROCS:
        PROCS[-1].stop()


def answers(url: str, *, context: ssl.SSLContext | None = None, timeout: float = 2) -> bool:
    """Whether GET `url` answers 200 now."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=context
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        answer = conn.getresponse()
        answer.read()
        return answer.status == 200
    except OSError:
        return False
    finally:
        conn.close()


def wait_answering(
    url: str,
    *,
    timeout: float,
    proc: Proc | None = None,
    context: ssl.SSLContext | None = None,
    interval: float = 0.1,
) -> None:
    """Until GET `url` answers 200; an error if `proc` exits first or nothing answers in
    `timeout` seconds (with the end of its log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        if answers(url, context=context):
            return
        time.sleep(interval)
    where = f"{proc.name} " if proc is not None else ""
    tail = f":\n{proc.tail()}" if proc is not None else ""
    raise RuntimeError(f"{where}did not answer {url} in {timeout:.0f} s{tail}")


def start_web(
    logdir: Path, *, workers: int = 1, name: str | None = None, env: dict | None = None
) -> tuple[Proc, int]:
    """uvicorn on a free port, returned once every worker has answered /healthz; `env` adds
    to this process's environment."""
    port = free_port()
    argv = web_command(port=port, workers=workers, log_level="warning")
    proc = Proc(name or f"web-w{workers}", argv, logdir, env={**os.environ, **(env or {})})
    wait_answering(f"http://127.0.0.1:{port}/healthz", proc=proc, timeout=60)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(4 * workers):  # every worker has imported Django
        conn.request("GET", "/healthz")
        conn.getresponse().read()
    conn.close()
    return proc, port


RELAY_CONFIG = """global
  maxconn 1000
defaults
  mode {mode}
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  timeout http-keep-alive 75s
frontend relay
  bind 127.0.0.1:{port}
  default_backend target
backend target
  server target 127.0.0.1:{target_port}
"""


def start_relay(target_port: int, logdir: Path, *, mode: str, check: str) -> tuple[Proc, int]:
    """HAProxy (Debian's, installed by `make services`) relaying to a local port, in `mode`
    tcp (bytes only) or http (requests parsed, connections kept): what one more hop in front
    of a peer costs, with no work of ours in it. Returned once GET `check` answers 200."""
    port = free_port()
    config = Path(logdir) / f"relay-{port}.cfg"
    config.write_text(RELAY_CONFIG.format(mode=mode, port=port, target_port=target_port))
    proc = Proc(f"relay-{port}", ["haproxy", "-f", str(config), "-db"], logdir)
    wait_answering(f"http://127.0.0.1:{port}{check}", proc=proc, timeout=10)
    return proc, port


# -- scripts/portal's table ------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.devstack")
    sub = parser.add_subparsers(dest="command", required=True)
    table = sub.add_parser("portal-table", help="scripts/portal's processes: name TAB command")
    table.add_argument("--scale", type=int, required=True)
    table.add_argument("--host", required=True)
    table.add_argument("--port", type=int, required=True)
    table.add_argument("--var", type=Path, required=True)
    table.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args(argv)
    rows = portal_table(
        scale=args.scale,
        host=args.host,
        port=args.port,
        var=args.var,
        concurrency=args.concurrency,
    )
    for name, command in rows.items():
        # scripts/portal splits the command line on spaces, as it always has
        print(f"{name}\t{' '.join(command)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
