"""What every benchmark needs: the platform's environment, a bench tenant with a token,
percentiles, CPU by process, and the results file (write_result). Its web servers, workers and
peers start through scripts/devstack.py. Not a benchmark itself (run_all skips `_*.py`).

Importing this module sets os.environ to the platform's settings with the Redis databases
given by TORUS_REDIS_DB_BASE (default 4: a running platform uses 0-2 and the tests 8-10).
"""

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
VAR = Path(os.environ.get("TORUS_VAR_DIR", ROOT / ".var"))
sys.path.insert(0, str(ROOT))

from scripts.devstack import platform_env  # noqa: E402 (ROOT on the path first)

ENV = platform_env(var=VAR, redis_db_base="4")
os.environ.update(ENV)


def log(name: str, msg: str) -> None:
    sys.stderr.write(f"[{name} {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


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


def cpu_parts(roots: dict[str, int], by_comm: dict[str, tuple[str, ...]]) -> dict:
    """CPU seconds so far by part: each of `roots` (name: pid, e.g. the web server and the
    worker) with its descendants; each of `by_comm` (name: process-name prefixes, e.g.
    PostgreSQL's or the Kubernetes control plane's) in all; the benchmark's own process; and
    the whole machine (/proc/stat: every process and the kernel). Stable from run to run
    where wall-clock ratios on 2 shared cores are not."""
    procs = proc_stats()
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


def proc_stats() -> dict[int, tuple[str, int, int]]:
    """{pid: (process name, parent pid, CPU ticks: utime stime cutime cstime)} from /proc."""
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            head, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
        except OSError:  # gone meanwhile
            continue
        fields = rest.split()
        ticks = sum(int(v) for v in fields[11:15])
        procs[int(pid)] = (head.split("(", 1)[1], int(fields[1]), ticks)
    return procs


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
    """The end of every benchmark: keep or remove its logs, write its results file and print
    its JSON line, exit code."""
    import json
    import shutil

    if keep_logs:
        log(name, f"logs kept in {logdir}")
    else:
        shutil.rmtree(logdir, ignore_errors=True)
    if result is None:
        return 1
    log(name, f"results in {write_result(result).relative_to(ROOT)}")
    print(json.dumps(result))
    return 0


# -- the results file ------------------------------------------------------------------------

RESULTS = ROOT / "bench" / "results"

# A figure's unit from the end of its name (the first that matches, its parents' otherwise).
UNIT_SUFFIXES = (
    ("_ms_per_", "ms/"),
    ("_seconds_per_", "s/"),
    ("_mib_per_s", "MiB/s"),
    ("_mb_per_s", "MB/s"),
    ("_mb_s", "MB/s"),
    ("_per_second", "/s"),
    ("_per_s", "/s"),
    ("_ms", "ms"),
    ("_seconds", "s"),
    ("_s", "s"),
    ("_bytes", "B"),
    ("_kib", "KiB"),
    ("_mib", "MiB"),
    ("_mb", "MB"),
    ("_percent", "%"),
    ("_pct", "%"),
)


def unit_of(path: list[str]) -> str:
    """The unit a figure's dotted path names: `..._ms` ms, `jobs_per_second` jobs/s,
    `cpu_ms_per_job` ms/job, `..._seconds` s, ...; "" for a count."""
    for part in reversed(path):
        name = "_" + part.lower()
        for suffix, unit in UNIT_SUFFIXES:
            if suffix.endswith("_") and suffix in name:  # "_ms_per_job": ms/job
                return unit + name.split(suffix, 1)[1]
            if name.endswith(suffix):
                if unit == "/s":  # jobs_per_second: jobs/s
                    thing = name[1 : -len(suffix)].rsplit("_", 1)[-1]
                    return f"{thing}/s"
                return unit
    return ""


def figures_of(tree, *, unit: str | None = None, prefix: tuple = ()) -> dict:
    """Every number in `tree` (nested dicts) as {"a.b.c": {"value": v, "unit": u}}; lists,
    strings and booleans stay in the raw result only."""
    out = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(figures_of(value, unit=unit, prefix=(*prefix, str(key))))
    elif isinstance(tree, int | float) and not isinstance(tree, bool) and prefix:
        out[".".join(prefix)] = {
            "value": tree,
            "unit": unit if unit is not None else unit_of(list(prefix)),
        }
    return out


def git_commit() -> dict:
    """The checkout's commit, and whether its tracked files differ from it."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(  # noqa: S603
            ["git", "-C", str(ROOT), *args],  # noqa: S607 (git from PATH)
            capture_output=True,
            text=True,
            check=False,
        )

    head = git("rev-parse", "HEAD")
    dirty = git("diff", "--quiet", "HEAD", "--")
    return {"commit": head.stdout.strip() or None, "dirty": dirty.returncode == 1}


def result_record(
    result: dict, *, argv: list[str] | None = None, when: float | None = None
) -> dict:
    """What bench/results/<benchmark>-<stamp>.json holds: the command line, the commit, the
    machine, the figures by name with units (Torus's, the peers', the ratios), CPU per
    operation by process where the benchmark measured it, and the benchmark's own result."""
    argv = list(sys.argv if argv is None else argv)
    if argv and Path(argv[0]).is_absolute():
        with contextlib.suppress(ValueError):  # no machine path in a committed file
            argv[0] = str(Path(argv[0]).relative_to(ROOT))
    when = time.time() if when is None else when
    figures = figures_of(result.get("metrics", {}))
    return {
        "benchmark": result["benchmark"],
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
        "command": argv,
        **git_commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
        },
        "figures": figures,
        "peers": figures_of(result.get("peers", {})),
        "ratios": figures_of(result.get("ratios", {}), unit="x"),
        "cpu_per_op": {k: v for k, v in figures.items() if "cpu" in k and "/" in v["unit"]},
        "result": result,
    }


def write_result(result: dict, *, directory: Path = RESULTS, argv: list[str] | None = None,
                 when: float | None = None) -> Path:  # fmt: skip
    """Write `result` (a benchmark's {"benchmark", "metrics", "peers", "ratios"}) as
    <directory>/<benchmark>-<UTC timestamp>.json (result_record); its path."""
    import json

    record = result_record(result, argv=argv, when=when)
    stamp = record["when"].replace("-", "").replace(":", "")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record['benchmark']}-{stamp}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


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
