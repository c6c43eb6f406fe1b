"""What every benchmark needs: the platform's environment, its own web server and workers,
a bench tenant with a token, and percentiles. Not a benchmark itself (run_all skips `_*.py`).

Importing this module sets os.environ to the platform's settings with the Redis databases
given by TORUS_REDIS_DB_BASE (default 4: a running platform uses 0-2 and the tests 8-10).
"""

import contextlib
import http.client
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
VAR = Path(os.environ.get("TORUS_VAR_DIR", ROOT / ".var"))
sys.path.insert(0, str(ROOT))


def log(name: str, msg: str) -> None:
    sys.stderr.write(f"[{name} {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def platform_env(*, redis_db_base: str = "4") -> dict[str, str]:
    """What the Makefile exports, plus the benchmark's own Redis databases."""
    env = dict(os.environ)
    env.setdefault("TORUS_VAR_DIR", str(VAR))
    # The database and Redis URLs: config/settings.py reads them from secrets/services.env.
    if not env.get("TORUS_SECRET_KEY"):
        key = VAR / "secret-key"
        if not key.is_file() or not key.read_text().strip():
            sys.exit(f"no {key}: run `make up` (or make migrate) once first")
        env["TORUS_SECRET_KEY"] = key.read_text().strip()
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["TORUS_REDIS_DB_BASE"] = env.get("TORUS_REDIS_DB_BASE") or redis_db_base
    return env


ENV = platform_env()
os.environ.update(ENV)


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "mean": round(statistics.fmean(ordered), 2),
        "max": round(ordered[-1], 2),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def django_setup():
    import django

    django.setup()


def manage(*args: str) -> None:
    subprocess.run([str(BIN / "python"), "manage.py", *args], cwd=ROOT, env=ENV, check=True)  # noqa: S603


def ensure_tenant(*, slug: str, project_slug: str, owner: str, token_name: str) -> dict:
    """A bench tenant with an owner, a project and a fresh token (the previous one revoked)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.compute.models import Cluster
    from apps.tenancy import services, token_cache
    from apps.tenancy.models import AccessToken, Membership, Project, Role, Tenant

    user, _ = get_user_model().objects.get_or_create(
        username=owner, defaults={"email": f"{owner}@example.org"}
    )
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        tenant = services.tenant_create(name=f"Benchmark {slug}", slug=slug, owner=user)
    Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": Role.OWNER})
    project, _ = Project.objects.get_or_create(
        tenant=tenant, slug=project_slug, defaults={"name": f"Benchmark {project_slug}"}
    )
    AccessToken.objects.filter(tenant=tenant, name=token_name, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    token_cache.bump(tenant_ids=[tenant.pk])  # a bulk update sends no signal
    _, token = services.token_create(actor=None, user=user, tenant=tenant, name=token_name)
    cluster = Cluster.objects.filter(name="local").first()
    return {"tenant": tenant, "project": project, "user": user, "token": token, "cluster": cluster}


# Prepended to the platform's processes (web servers, workers): `setpriv ...` to run them as
# the platform's account, as scripts/portal does; a benchmark's --platform-user sets it.
RUN_AS: list[str] = []


def run_as(user: str) -> None:
    """The platform's processes this benchmark starts run as `user` ("root": as this process)."""
    RUN_AS[:] = [] if user == "root" else ["setpriv", f"--reuid={user}", f"--regid={user}",
                                             "--init-groups", "--"]  # fmt: skip


class Proc:
    """A child process in its own session, its output in logdir/<name>.log."""

    def __init__(self, name: str, argv: list[str], logdir: Path, env: dict | None = None):
        self.name, self.log_path = name, logdir / f"{name}.log"
        self.log_file = open(self.log_path, "ab")  # noqa: SIM115
        if argv[0].startswith(str(BIN)):  # ours (not a peer such as HAProxy)
            argv = [*RUN_AS, *argv]
        self.popen = subprocess.Popen(  # noqa: S603
            argv,
            cwd=ROOT,
            env=env or ENV,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        PROCS.append(self)

    def stop(self) -> None:
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
    while PROCS:
        PROCS[-1].stop()


def start_web(
    logdir: Path, *, workers: int = 1, name: str | None = None, env: dict | None = None
) -> tuple[Proc, int]:
    """uvicorn on a free port, returned once every worker has answered /healthz; `env` adds
    to the platform's environment."""
    port = free_port()
    argv = [str(BIN / "uvicorn"), "config.asgi:application", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--no-access-log", "--log-level", "warning"]
    if workers > 1:
        argv += ["--workers", str(workers)]
    proc = Proc(name or f"web-w{workers}", argv, logdir, env={**ENV, **env} if env else None)
    wait_answering(proc, port, "/healthz", timeout=60)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(4 * workers):  # every worker has imported Django
        conn.request("GET", "/healthz")
        conn.getresponse().read()
    conn.close()
    return proc, port


def wait_answering(proc: "Proc", port: int, path: str, *, timeout: float) -> None:
    """Until GET `path` on the process's port answers 200; an error if it exits first or
    does not answer in `timeout` seconds (with the end of its log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            conn.close()
            if answer.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} did not answer {path} on :{port}:\n{proc.tail()}")


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
    config = logdir / f"relay-{port}.cfg"
    config.write_text(RELAY_CONFIG.format(mode=mode, port=port, target_port=target_port))
    proc = Proc(f"relay-{port}", ["haproxy", "-f", str(config), "-db"], logdir)
    wait_answering(proc, port, check, timeout=10)
    return proc, port


def cpu_parts(roots: dict[str, int], by_comm: dict[str, tuple[str, ...]]) -> dict:
    """CPU seconds so far by part: each of `roots` (name: pid, e.g. the web server and the
    worker) with its descendants; each of `by_comm` (name: process-name prefixes, e.g.
    PostgreSQL's or the Kubernetes control plane's) in all; the benchmark's own process; and
    the whole machine (/proc/stat: every process and the kernel). Stable from run to run
    where wall-clock ratios on 2 shared cores are not."""
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            head, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
        except OSError:  # gone meanwhile
            continue
        fields = rest.split()
        ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        procs[int(pid)] = (head.split("(", 1)[1], int(fields[1]), ticks)
    owner = {pid: name for name, pid in roots.items()}
    grew = True
    while grew:  # descendants (uvicorn's and Celery's worker processes)
        grew = False
        for pid, (_, ppid, _) in procs.items():
            if ppid in owner and pid not in owner:
                owner[pid] = owner[ppid]
                grew = True
    parts = dict.fromkeys([*roots, *by_comm, "bench"], 0)
    for pid, (comm, _, ticks) in procs.items():
        if pid in owner:
            parts[owner[pid]] += ticks
        elif pid == os.getpid():
            parts["bench"] += ticks
        else:
            for name, prefixes in by_comm.items():
                if comm.startswith(prefixes):
                    parts[name] += ticks
    cpu = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    parts["machine"] = sum(int(v) for v in cpu[:3] + cpu[5:8])  # all but idle and iowait
    return {k: v / os.sysconf("SC_CLK_TCK") for k, v in parts.items()}


def cpu_per_job(before: dict, after: dict, n: int) -> dict:
    """Milliseconds of CPU per job by part between two `cpu_parts` readings."""
    return {k: round((after[k] - before[k]) * 1000 / n, 2) for k in before}


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def environment() -> dict:
    """How loaded the machine is (a benchmark shares 2 cores with everything else)."""
    from django.db import connection

    with connection.cursor() as cursor:
        took = []
        for _ in range(200):
            started = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchone()
            took.append((time.perf_counter() - started) * 1000)
    return {
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "pg_select1_ms_p50": round(statistics.median(took), 3),
    }


def finish(name: str, result: dict | None, *, logdir: Path, keep_logs: bool) -> int:
    """The end of every benchmark: keep or remove its logs, print its JSON line, exit code."""
    import json
    import shutil

    if keep_logs:
        log(name, f"logs kept in {logdir}")
    else:
        shutil.rmtree(logdir, ignore_errors=True)
    if result is None:
        return 1
    print(json.dumps(result))
    return 0


# -- py-spy (optional; `pip install --target /tmp/bench-pyspy py-spy`) ----------------------


def pyspy_path() -> str | None:
    local = "/tmp/bench-pyspy/bin/py-spy"  # noqa: S108 (pip install --target /tmp/bench-pyspy)
    return shutil.which("py-spy") or (local if os.access(local, os.X_OK) else None)


def pyspy_start(pid: int, out: Path, *, rate: int = 200, subprocesses: bool = True):
    """py-spy recording `pid` (raw folded stacks into `out`), or None without py-spy."""
    exe = pyspy_path()
    if not exe:
        return None
    argv = [exe, "record", "--format", "raw", "--rate", str(rate), "--pid", str(pid)]
    argv += ["--output", str(out), *(["--subprocesses"] if subprocesses else [])]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603


def pyspy_stop(proc) -> None:
    if proc is not None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


def pyspy_summary(path: Path, markers: list[tuple[str, str]]) -> dict:
    """Share of the samples whose stack holds each (marker, label), inclusive, and the top
    leaf frames."""
    if not path.is_file():
        return {}
    total, hits, leaves = 0, {label: 0 for _, label in markers}, {}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        frames = stack.replace(";", " ") + " "
        for marker, label in markers:
            if marker in frames:
                hits[label] += int(count)
        leaf = stack.rsplit(";", 1)[-1]
        leaves[leaf] = leaves.get(leaf, 0) + int(count)
    if not total:
        return {}
    top = sorted(leaves.items(), key=lambda kv: -kv[1])[:15]
    return {
        "samples": total,
        "percent": {k: round(100 * v / total, 1) for k, v in hits.items() if v},
        "top_leaves_percent": {k: round(100 * v / total, 1) for k, v in top},
    }


class SectionTimer:
    """In-process profile of a request path: `timed(name, fn)` wraps a function so its time
    adds to `totals[name]` (inclusive); `sql_wrapper` (for connection.execute_wrapper) counts
    SQL statements and time under the innermost timed section, and by statement."""

    def __init__(self, outer: str = "request (rest)"):
        self.totals: dict[str, float] = {}
        self.sql: dict[str, list] = {}
        self.statements: dict[str, list] = {}
        self.stack: list[str] = [outer]

    def timed(self, name: str, fn):
        def wrapper(*args, **kwargs):
            self.stack.append(name)
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - started
                self.stack.pop()

        return wrapper

    def sql_wrapper(self, execute, query, params, many, context):
        import re

        started = time.perf_counter()
        try:
            return execute(query, params, many, context)
        finally:
            took = time.perf_counter() - started
            where = re.sub(r"SELECT .*? FROM", "SELECT ... FROM", " ".join(query.split()))[:110]
            for table, key in (
                (self.sql, self.stack[-1]),
                (self.statements, f"{self.stack[-1]}: {where}"),
            ):
                entry = table.setdefault(key, [0, 0.0])
                entry[0] += 1
                entry[1] += took
