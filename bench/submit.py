"""Job-submission benchmark: N trivial jobs through Torus's REST API until every one has a
Slurm job id, beside the same N jobs submitted by a plain sbatch loop and by direct
slurmrestd calls; and the controller RPCs of one reconcile pass with N and with 10 jobs known.

Run alone:  .venv/bin/python bench/submit.py [--quick] [--jobs N] [--py-spy]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "submit", "metrics": {...}, "peers": {...}, "ratios": {...}}

It uses the real `torus` database (a dedicated tenant `bench`, project `submit`), starts its
own uvicorn and Celery worker on free ports with TORUS_REDIS_DB_BASE=4 (so it never touches
a running platform's queues), and scancels only the Slurm jobs it submitted itself.
See bench/README.md.
"""

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ENV,
    VAR,
    SectionTimer,
    cpu_parts,
    cpu_per_job,
    django_setup,
    ensure_tenant,
    environment,
    finish,
    manage,
    percentiles,
    pyspy_start,
    pyspy_stop,
    pyspy_summary,
)
from _common import log as _log

from apps.compute.envfile import read_env_file
from scripts.devstack import Proc, run_as, start_web, stop_all, worker_command

OUR_IDS: list[str] = []  # every Slurm id the peers got, for the cleanup of an aborted run


def log(msg: str) -> None:
    _log("submit", msg)


TENANT_SLUG, PROJECT_SLUG, OWNER, TOKEN_NAME = "bench", "submit", "bench-owner", "bench-submit"
POLL_S = 0.05
WARM_JOBS = 16  # per freshly started web server, before its timed run (warm_up)
PASSES = 7  # reconcile passes measured per case; the least RPC count is reported (others
# talking to the same slurmctld, e.g. a test suite's control loop, only ever add to it)
SBATCH = shutil.which("sbatch") or "/usr/bin/sbatch"
# Names of the Slurm jobs this benchmark submits (used only to scancel leftovers of a killed run).
OUR_NAME = re.compile(r"^bench-(\d+|sbatch-\d+|restd-\d+|rpc-\d+)$")
# Processes whose CPU a Torus round is charged by name (beside the web server, the worker and
# the privileged helper, counted by pid with their children): Slurm's daemons, the stores.
CPU_BY_COMM = {
    "slurmrestd": ("slurmrestd",),
    "slurmctld": ("slurmctld",),
    "slurmd": ("slurmd", "slurmstepd"),
    "munged": ("munged",),
    "postgres": ("postgres",),
    "redis": ("redis-server",),
}


# -- environment ---------------------------------------------------------------------------


SLURM = read_env_file(VAR / "slurm" / "env")
SLURM_ENV = {**ENV, "SLURM_CONF": SLURM["SLURM_CONF"]}
SLURM_ENV.pop("SLURM_JWT", None)


# -- Slurm helpers -------------------------------------------------------------------------


def slurm(argv: list[str], check: bool = True) -> str:
    result = subprocess.run(argv, env=SLURM_ENV, capture_output=True, text=True, check=False)  # noqa: S603
    if check and result.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {result.stderr.strip()}")
    return result.stdout


def scancel(ids) -> None:
    ids = sorted({str(i) for i in ids if i}, key=int)
    for start in range(0, len(ids), 200):
        slurm(["scancel", *ids[start : start + 200]], check=False)


def queued_ids() -> set[str]:
    """Jobs still pending/running/completing in the controller."""
    return set(slurm(["squeue", "-h", "-o", "%i"], check=False).split())


def wait_gone(ids, timeout: float = 120.0) -> None:
    ids = {str(i) for i in ids if i}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = ids & queued_ids()
        if not left:
            return
        time.sleep(0.5)
    log(f"warning: {len(left)} of our Slurm jobs still queued after {timeout:.0f} s")


def controller_room(needed: int) -> None:
    """Refuse to start if our jobs would fill slurmctld's job table (MaxJobCount).

    slurmctld keeps every finished job for MinJobAge seconds (3600 here) and refuses all
    submissions, everyone's, once MaxJobCount records are held; one full run adds ~4000.
    """
    config = slurm(["scontrol", "show", "config"])
    limit = int(re.search(r"^MaxJobCount\s*=\s*(\d+)", config, re.M).group(1))
    age = re.search(r"^MinJobAge\s*=\s*(\d+)", config, re.M).group(1)
    held = len(slurm(["squeue", "-h", "-t", "all", "-o", "%i"]).split())
    room = limit - held - max(1000, limit // 10)  # leave room for everyone else
    log(f"slurmctld holds {held} of MaxJobCount={limit} job records; this run needs {needed}")
    if needed > room:
        sys.exit(
            f"not starting: {needed} more jobs would leave slurmctld too few of its {limit} job "
            f"records ({held} held; finished jobs are kept MinJobAge={age} s). Wait, or use --jobs."
        )


def sweep_leftovers() -> None:
    """scancel Slurm jobs that a killed earlier run of this benchmark left behind."""
    out = slurm(["squeue", "-h", "-o", "%i|%j|%k"], check=False)
    stale = []
    for line in out.splitlines():
        job_id, _, rest = line.partition("|")
        name, _, comment = rest.partition("|")
        if OUR_NAME.match(name) and (not name[6:].isdigit() or comment.startswith("torus:")):
            stale.append(job_id)
    if stale:
        log(f"scancel {len(stale)} leftover bench jobs from an earlier run")
        scancel(stale)
        wait_gone(stale)


def sdiag_rpcs() -> dict[str, int]:
    out = slurm(["sdiag"])
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    counts = {}
    for match in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", section, re.M):
        counts[match.group(1)] = int(match.group(2))
    return counts


# -- Django (in this process: setup, polling, reconcile passes, cleanup) ---------------------


def reconcile_pass(cluster_id) -> tuple[dict, float]:
    from apps.jobs.reconcile import reconcile_cluster

    started = time.perf_counter()
    stats = reconcile_cluster(cluster_id=cluster_id)
    return stats, time.perf_counter() - started


def active_bench_jobs(project):
    from apps.jobs.models import Job
    from apps.jobs.states import TERMINAL

    return Job.objects.filter(project=project).exclude(state__in=list(TERMINAL))


def finish_torus_jobs(ctx, job_ids=None) -> None:
    """scancel the bench tenant's Slurm jobs and bring every bench job to a terminal state."""
    from apps.core.exceptions import Conflict
    from apps.jobs.models import JobAttempt
    from apps.jobs.services import job_cancel
    from apps.tenancy.access import actor_for_user

    project, cluster = ctx["project"], ctx["cluster"]
    attempts = JobAttempt.objects.filter(job__project=project).exclude(backend_id="")
    if job_ids is not None:
        attempts = attempts.filter(job_id__in=job_ids)
    else:
        attempts = attempts.filter(job__in=active_bench_jobs(project))
    ids = list(attempts.values_list("backend_id", flat=True))
    scancel(ids)
    wait_gone(ids)
    for _ in range(4):
        if not active_bench_jobs(project).exists():
            return
        reconcile_pass(cluster.pk)
    actor = actor_for_user(user=ctx["user"])
    left = list(active_bench_jobs(project))
    for job in left:
        with contextlib.suppress(Conflict):
            job_cancel(actor=actor, job=job)
    if left:
        time.sleep(1.0)
        reconcile_pass(cluster.pk)
    still = active_bench_jobs(project).count()
    if still:
        log(f"warning: {still} bench jobs not terminal yet (their cancel is on its way)")


# -- the platform's processes ---------------------------------------------------------------


def start_worker(logdir: Path) -> Proc:
    from config.celery import app

    hostname = f"bench-submit-{os.getpid()}@{socket.gethostname()}"
    app.control.purge()  # tasks a killed earlier run left in our own broker database
    argv = worker_command(hostname=hostname, loglevel="INFO", queues="celery")
    proc = Proc("worker", argv, logdir)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"celery worker exited:\n{proc.tail()}")
        if app.control.ping(destination=[hostname], timeout=1.0):
            log(f"celery worker {hostname} answers ping")
            return proc
    raise RuntimeError(f"celery worker did not answer a ping:\n{proc.tail()}")


def drop_task_results() -> None:
    """Our workers' Celery results (kept a day by default) in our own Redis database."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.CELERY_RESULT_BACKEND)
    keys = list(client.scan_iter("celery-task-meta-*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])


def clear_locks(cluster_id) -> None:
    from django.core.cache import cache

    for kind in ("dispatch", "reconcile"):
        cache.delete(f"torus:lock:{kind}:{cluster_id}")


# -- phase: Torus through its REST API -------------------------------------------------------


def post_jobs(
    port: int, token: str, project_id, names: list[str], threads: int, command, batch: int = 0
):
    """POST every job (one per request, or `batch` per request to /api/v1/jobs/batch) over
    `threads` keep-alive connections; [(request latency_s, status, job_id)] per job."""
    lock = threading.Lock()
    size = batch or 1
    todo = iter([list(range(k, min(k + size, len(names)))) for k in range(0, len(names), size)])
    results: list = [None] * len(names)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def spec(i: int) -> dict:
        return {
            "project": str(project_id),
            "name": names[i],
            "command": command,
            "resources": {"gpus_per_node": 0, "time_limit": 1},
        }

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                unit = next(todo, None)
            if unit is None:
                break
            if batch:
                path, body = "/api/v1/jobs/batch/", json.dumps({"jobs": [spec(i) for i in unit]})
            else:
                path, body = "/api/v1/jobs/", json.dumps(spec(unit[0]))
            started = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as exc:
                payload, status = str(exc).encode(), 0
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            latency = time.perf_counter() - started
            ids = [None] * len(unit)
            if status == 201:
                data = json.loads(payload)
                ids = [row["id"] for row in data["results"]] if batch else [data["id"]]
            elif status:
                log(f"POST {names[unit[0]]}: HTTP {status} {payload[:300]!r}")
            for i, job_id in zip(unit, ids, strict=True):
                results[i] = (latency, status, job_id)
        conn.close()

    pool = [threading.Thread(target=client, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    return pool, results


def torus_phase(
    ctx, port: int, n: int, threads: int, label: str, command=None, batch: int = 0
) -> dict:
    from django.utils import timezone

    from apps.jobs.models import AttemptState, JobAttempt
    from apps.jobs.tasks import dispatch_cluster

    command = command or ["true"]
    project, cluster = ctx["project"], ctx["cluster"]
    prefix = "bench-rpc" if command != ["true"] else "bench"
    names = [f"{prefix}-{i}" for i in range(n)]
    since = timezone.now()
    log(f"{label}: POST {n} jobs with {threads} client thread(s)")
    roots = ctx.get("cpu_roots", {})
    cpu_before = cpu_parts(roots, CPU_BY_COMM)
    t0 = time.perf_counter()
    pool, results = post_jobs(port, ctx["token"], project.pk, names, threads, command, batch)
    phase = JobAttempt.objects.filter(job__project=project, job__created_at__gte=since)
    posts_done_at, last_progress, last_count, kicks = None, t0, -1, 0
    while True:
        alive = any(t.is_alive() for t in pool)
        if not alive and posts_done_at is None:
            posts_done_at = time.perf_counter()
        with_id = phase.exclude(backend_id="").count()
        if not alive:
            accepted = sum(1 for r in results if r and r[1] == 201)
            rejected = phase.filter(state=AttemptState.FAILED, backend_id="").count()
            if with_id + rejected >= accepted:
                break
        now = time.perf_counter()
        if with_id != last_count:
            last_count, last_progress = with_id, now
        elif now - last_progress > 10 and not alive:
            # The platform's own backstop (beat's control pass every 2 s) would do this;
            # this benchmark runs no beat, so it kicks the dispatcher itself and says so.
            kicks += 1
            log(f"{label}: no progress for 10 s at {with_id} ids; kicking jobs.dispatch_cluster")
            dispatch_cluster.delay(str(cluster.pk))
            last_progress = now
            if kicks > 10:
                raise RuntimeError(f"{label}: dispatch stalled at {with_id} of {accepted}")
        time.sleep(POLL_S)
    elapsed = time.perf_counter() - t0
    cpu = cpu_per_job(cpu_before, cpu_parts(roots, CPU_BY_COMM), n)
    latencies = [r[0] * 1000 for r in results if r]
    errors = sum(1 for r in results if not r or r[1] != 201)
    job_ids = [r[2] for r in results if r and r[2]]
    # Where the time went, from the attempts' own timestamps.
    rows = list(
        JobAttempt.objects.filter(job_id__in=job_ids).values_list(
            "job__created_at", "submit_started_at", "submitted_at"
        )
    )
    lag = [(s - c).total_seconds() * 1000 for c, _, s in rows if s]
    claimed = [s for _, s, _ in rows if s]
    submitted = [s for _, _, s in rows if s]
    dispatch_window = (max(submitted) - min(claimed)).total_seconds() if submitted else 0
    out = {
        "seconds": round(elapsed, 3),
        "jobs_per_second": round(n / elapsed, 1),
        "api_seconds": round(posts_done_at - t0, 3),
        "tail_after_last_post_seconds": round(elapsed - (posts_done_at - t0), 3),
        "api_latency_ms": percentiles(latencies),
        # per-request latency at the start and at the end of the run (does it grow with N?)
        "api_latency_ms_first_tenth": percentiles(latencies[: max(1, n // 10)]),
        "api_latency_ms_last_tenth": percentiles(latencies[-max(1, n // 10) :]),
        "submit_to_slurm_id_ms": percentiles(lag),
        "dispatcher_jobs_per_second": round(len(submitted) / dispatch_window, 1)
        if dispatch_window
        else None,
        "http_errors": errors,
        "rejected": phase.filter(state=AttemptState.FAILED, backend_id="").count(),
        "dispatch_kicks": kicks,
        # CPU of each part while the round ran (from the first POST to the last Slurm id);
        # "platform" is the web server, the worker and the helper together
        "cpu_ms_per_job": {
            **cpu,
            "platform": round(sum(cpu.get(k, 0) for k in ("web", "worker", "helper")), 2),
        },
    }
    log(
        f"{label}: {elapsed:.2f} s ({n / elapsed:.1f} jobs/s); API done at "
        f"{out['api_seconds']:.2f} s; latency p50 {out['api_latency_ms'].get('p50')} ms "
        f"p95 {out['api_latency_ms'].get('p95')} ms; dispatcher "
        f"{out['dispatcher_jobs_per_second']} jobs/s; errors {errors}; CPU ms/job "
        f"{json.dumps(out['cpu_ms_per_job'])}"
    )
    out["_job_ids"] = job_ids
    return out


def serve(ctx, worker: Proc, logdir: Path, **kwargs) -> tuple[Proc, int]:
    """A fresh web server (start_web), whose CPU and the worker's the next rounds count."""
    web, port = start_web(logdir, **kwargs)
    ctx["cpu_roots"] = {"web": web.popen.pid, "worker": worker.popen.pid, **helper_pid()}
    return web, port


def helper_pid() -> dict[str, int]:
    """{"helper": pid} of the running privileged helper (a python3 named by its script), or
    {} where there is none (before issue 33)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if b"torus_helperd" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return {"helper": int(pid)}
    return {}


def warm_up(ctx, port: int) -> None:
    """WARM_JOBS jobs through a freshly started web server and the worker before a timed run,
    not counted: a platform serves researchers from warm processes, and a fresh process's
    first requests and dispatch pass pay for imports, connections and caches once."""
    run = torus_phase(ctx, port, WARM_JOBS, 8, "warm-up (not counted)")
    finish_torus_jobs(ctx, run.pop("_job_ids"))


def plain_http_ab(ctx, worker: Proc, logdir: Path, n: int, workers: int) -> dict:
    """One POST per job, 8 client threads, against uvicorn as configured (the submit route
    through Django's WSGI handler in a thread pool, apps/core/plain_http.py) and against one
    with TORUS_PLAIN_HTTP_THREADS=0 (Django's ASGI handler), two rounds each, alternating."""
    runs: dict[str, list] = {"wsgi": [], "asgi": []}
    for side in ("wsgi", "asgi", "asgi", "wsgi"):
        env = {"TORUS_PLAIN_HTTP_THREADS": "0"} if side == "asgi" else None
        web, port = serve(ctx, worker, logdir, workers=workers, name=f"web-ab-{side}", env=env)
        warm_up(ctx, port)
        run = torus_phase(ctx, port, n, 8, f"plain HTTP A/B: {side}")
        finish_torus_jobs(ctx, run.pop("_job_ids"))
        web.stop()
        runs[side].append(run)
    out = {
        f"{side}_{key}": [r[key] for r in side_runs]
        for side, side_runs in runs.items()
        for key in ("api_seconds", "seconds")
    }
    out["api_latency_ms_p50"] = {
        side: [r["api_latency_ms"].get("p50") for r in rs] for side, rs in runs.items()
    }
    log(f"plain HTTP A/B: {json.dumps(out)}")
    return out


def dispatch_passes(worker: Proc, offset: int) -> dict:
    """What the worker log says about jobs.dispatch_cluster runs since `offset`."""
    text = worker.log_path.read_bytes()[offset:].decode(errors="replace")
    runs = re.findall(r"jobs\.dispatch_cluster\[[^\]]+\] succeeded in ([\d.]+)s: (\d+)", text)
    working = [(float(s), int(k)) for s, k in runs if int(k)]
    return {
        "tasks": len(runs),
        "passes_that_submitted": len(working),
        "jobs_per_pass": [k for _, k in working][:50],
        "seconds_in_submitting_passes": round(sum(s for s, _ in working), 3),
    }


# -- peers -------------------------------------------------------------------------------------


def sbatch_loop(n: int, workdir: Path) -> dict:
    log(f"peer sbatch loop: {n} sequential sbatch --parsable --wrap true")
    ids, t0 = [], time.perf_counter()
    for i in range(n):
        out = subprocess.run(  # noqa: S603
            [SBATCH, "--parsable", "--wrap", "true", "-J", f"bench-sbatch-{i}", "--time=1"],
            env=SLURM_ENV,
            cwd=workdir,
            capture_output=True,
            text=True,
            check=True,
        )
        ids.append(out.stdout.strip().split(";")[0])
        OUR_IDS.append(ids[-1])
    elapsed = time.perf_counter() - t0
    log(f"peer sbatch loop: {elapsed:.2f} s ({n / elapsed:.1f} jobs/s)")
    return {"seconds": round(elapsed, 3), "jobs_per_second": round(n / elapsed, 1), "_ids": ids}


def restd(n: int, threads: int) -> dict:
    import httpx
    import jwt

    key = Path(SLURM["TORUS_SLURM_JWT_KEY"]).read_bytes()
    now = int(time.time())
    token = jwt.encode({"sun": "root", "iat": now, "exp": now + 3600}, key, "HS256")
    url = f"{SLURM['TORUS_SLURMRESTD_URL'].rstrip('/')}/slurm/v0.0.38/job/submit"
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
    limits = httpx.Limits(max_connections=threads, max_keepalive_connections=threads)
    client = httpx.Client(timeout=60, limits=limits, headers=headers)
    client.get(url.replace("/job/submit", "/ping"))  # connect before the clock starts
    lock, todo, ids, latencies = threading.Lock(), iter(range(n)), [None] * n, []

    def worker():
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            body = {
                "script": "#!/bin/bash\ntrue\n",
                "job": {
                    "name": f"bench-restd-{i}",
                    "environment": {"PATH": "/usr/bin:/bin"},
                    "current_working_directory": "/tmp",  # noqa: S108
                    "time_limit": 1,
                },
            }
            started = time.perf_counter()
            response = client.post(url, json=body)
            latencies.append((time.perf_counter() - started) * 1000)
            ids[i] = str(response.json().get("job_id") or "")
            OUR_IDS.append(ids[i])
            if response.status_code != 200 or not ids[i]:
                log(f"restd submit {i}: HTTP {response.status_code} {response.text[:200]}")

    label = f"peer slurmrestd, {threads} thread(s)"
    log(f"{label}: {n} POST /job/submit")
    t0 = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - t0
    client.close()
    log(f"{label}: {elapsed:.2f} s ({n / elapsed:.1f} jobs/s)")
    return {
        "seconds": round(elapsed, 3),
        "jobs_per_second": round(n / elapsed, 1),
        "latency_ms": percentiles(latencies),
        "failed": sum(1 for i in ids if not i),
        "_ids": [i for i in ids if i],
    }


# -- reconcile RPCs ----------------------------------------------------------------------------


def rpc_phase(ctx, port: int, n: int) -> dict:
    """N `sleep 120` jobs known to the platform, then sdiag --reset / one pass / sdiag, x3."""
    from apps.jobs.models import AttemptState, JobAttempt

    submitted = torus_phase(ctx, port, n, 8, f"rpc setup ({n} sleep-120 jobs)", ["sleep", "120"])
    cluster_id = ctx["cluster"].pk
    time.sleep(3.0)  # let the first ones start (their launchers call scontrol/srun)
    reconcile_pass(cluster_id)  # the first pass also writes the RUNNING transitions
    time.sleep(1.0)
    tracked = JobAttempt.objects.filter(
        job__cluster_id=cluster_id, state__in=[AttemptState.SUBMITTED, AttemptState.RUNNING]
    ).count()
    from apps.compute.backends.slurm import SlurmBackend

    calls: list[str] = []  # the backend's own calls (REST paths, CLI commands) in the pass
    call, run = SlurmBackend._call, SlurmBackend._run

    def counted_call(self, method, path, **kwargs):
        calls.append(f"{method} {path}")
        return call(self, method, path, **kwargs)

    def counted_run(self, argv, **kwargs):
        calls.append(argv[0])
        return run(self, argv, **kwargs)

    if tracked < n:
        log(
            f"warning: only {tracked} of {n} attempts tracked: someone else cancelled jobs "
            "(e.g. a test suite's teardown that scancels the whole queue); the RPC count holds"
        )
    passes = []
    SlurmBackend._call, SlurmBackend._run = counted_call, counted_run
    try:
        for _ in range(PASSES):
            calls.clear()
            slurm(["sdiag", "--reset"])
            stats, seconds = reconcile_pass(cluster_id)
            counts = sdiag_rpcs()
            counts.pop("REQUEST_STATS_INFO", None)
            passes.append(
                {
                    "rpcs": sum(counts.values()),
                    "by_type": counts,
                    "stats": stats,
                    "s": seconds,
                    "backend_calls": list(calls),
                }
            )
            time.sleep(0.5)
    finally:
        SlurmBackend._call, SlurmBackend._run = call, run
    # the same window without a pass: what else talks to slurmctld meanwhile (the least of 3)
    windows = []
    for _ in range(3):
        slurm(["sdiag", "--reset"])
        time.sleep(statistics.median(p["s"] for p in passes))
        counts = sdiag_rpcs()
        counts.pop("REQUEST_STATS_INFO", None)
        windows.append(counts)
    background = min(windows, key=lambda c: sum(c.values()))
    best = min(passes, key=lambda p: p["rpcs"])
    log(
        f"reconcile with {tracked} attempts tracked: {[p['rpcs'] for p in passes]} RPCs per pass "
        f"(min {best['rpcs']}: {best['by_type']}); stats['rpcs']={best['stats'].get('rpcs')}; "
        f"pass {statistics.median(p['s'] for p in passes):.2f} s; background {background}"
    )
    finish_torus_jobs(ctx, submitted["_job_ids"])
    return {
        "tracked_attempts": tracked,
        "rpcs_per_pass": best["rpcs"],
        "rpcs_per_pass_all": [p["rpcs"] for p in passes],
        "rpcs_per_pass_median": statistics.median(p["rpcs"] for p in passes),
        # the least pass minus the least same-length window without a pass
        "rpcs_per_pass_net_of_background": max(0, best["rpcs"] - sum(background.values())),
        "backend_calls_per_pass": sorted({len(p["backend_calls"]) for p in passes}),
        "backend_calls": best["backend_calls"],
        "rpcs_by_type": best["by_type"],
        "stats_rpcs": best["stats"].get("rpcs"),
        "pass_seconds": round(statistics.median(p["s"] for p in passes), 3),
        "background_rpcs_same_window": sum(background.values()),
    }


# -- profile: one request, in-process, split by section ---------------------------------------


def profile_requests(ctx, k: int) -> dict:
    """k POSTs through Django's full stack in this process, timed by section, SQL counted."""
    from django.db import connection
    from rest_framework.test import APIClient

    import apps.jobs.admission as admission
    import apps.jobs.api.render as render
    import apps.jobs.api.views as views
    import apps.jobs.services as job_services
    import apps.jobs.submit_cache as submit_cache
    import apps.tenancy.authentication as authentication
    from apps.core.api.throttling import PrincipalRateThrottle

    timer = SectionTimer()
    totals, sql, statements = timer.totals, timer.sql, timer.statements
    timed, sql_wrapper = timer.timed, timer.sql_wrapper

    patches = [
        (authentication, "token_lookup"),
        (views, "validated"),
        (job_services, "jobs_create"),
        (job_services, "choose_placement"),
        (job_services, "normalise"),
        (submit_cache, "generations"),
        (admission, "admit_submitted"),
        (admission, "admit_tenant"),
        (admission, "_books"),
        (render, "job_detail"),
    ]
    saved = [(mod, name, getattr(mod, name)) for mod, name in patches]
    for mod, name, fn in saved:
        setattr(mod, name, timed(f"{mod.__name__.rsplit('.', 1)[-1]}.{name}", fn))
    detail_cls = views.JobDetailSerializer

    class TimedDetail(detail_cls):
        @property
        def data(self):
            return timed("response serializer", lambda: detail_cls.data.fget(self))()

    views.JobDetailSerializer = TimedDetail
    allow = PrincipalRateThrottle.allow_request
    PrincipalRateThrottle.allow_request = timed("throttle (redis)", allow)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ctx['token']}")
    wall = []
    try:
        with connection.execute_wrapper(sql_wrapper):
            for i in range(k):
                started = time.perf_counter()
                response = client.post(
                    "/api/v1/jobs/",
                    {
                        "project": str(ctx["project"].pk),
                        "name": f"bench-{i}",
                        "command": ["true"],
                        "resources": {"gpus_per_node": 0, "time_limit": 1},
                    },
                    format="json",
                )
                wall.append(time.perf_counter() - started)
                assert response.status_code == 201, response.content[:300]
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        views.JobDetailSerializer = detail_cls
        PrincipalRateThrottle.allow_request = allow
    per = {name: round(v / k * 1000, 2) for name, v in sorted(totals.items(), key=lambda x: -x[1])}
    queries = {
        name: {"queries": round(c / k, 1), "ms": round(s / k * 1000, 2)}
        for name, (c, s) in sql.items()
    }
    out = {
        "requests": k,
        "in_process_request_ms": percentiles([w * 1000 for w in wall]),
        "inclusive_ms_per_request": per,
        "sql_per_request_by_innermost_section": queries,
        "sql_queries_per_request": round(sum(c for c, _ in sql.values()) / k, 1),
        "sql_ms_per_request": round(sum(s for _, s in sql.values()) / k * 1000, 2),
        "top_sql_ms_per_request": {
            q: {"n": round(c / k, 1), "ms": round(s / k * 1000, 2)}
            for q, (c, s) in sorted(statements.items(), key=lambda x: -x[1][1])[:12]
        },
    }
    log(f"profile ({k} in-process requests): {json.dumps(out)}")
    return out


# -- py-spy (optional) ---------------------------------------------------------------------------


MARKERS = [
    ("token_lookup", "auth: token_lookup"),
    ("allow_request", "throttle"),
    ("jobs_create ", "jobs_create (all)"),
    ("admit_submitted ", "admission: admit_submitted"),
    ("run_validation ", "spec validation (reused serializer)"),
    ("job_detail ", "render: job_detail"),
    ("admit_tenant ", "admission: admit_tenant"),
    ("_books ", "admission: _books"),
    ("attempt_open ", "attempt_open (mkdir + insert)"),
    ("audit_record ", "audit_record"),
    ("choose_placement ", "choose_placement"),
    ("JobSpecSerializer", "spec validation"),
    ("to_representation ", "DRF serialization"),
    ("_commit ", "DB commit"),
    ("execute ", "DB execute (all SQL)"),
    ("connect ", "DB connect"),
    ("dispatch_cluster ", "dispatch_cluster (all)"),
    ("claim ", "dispatch: claim"),
    ("recover_submitting ", "dispatch: recover_submitting"),
    ("build_submission ", "dispatch: build_submission"),
    ("_call ", "slurmrestd call"),
    ("_token ", "JWT encode"),
    ("mark_submitted ", "dispatch: mark_submitted"),
    ("delay ", "celery delay (publish)"),
]


def cpu_only(ctx, worker: Proc, logdir: Path, n: int, metrics: dict) -> dict:
    """--cpu-only: the headline round alone (one uvicorn worker, 8 client threads), for the
    CPU each part of the platform spends per submitted job."""
    web, port = serve(ctx, worker, logdir, workers=1)
    warm_up(ctx, port)
    run = torus_phase(ctx, port, n, 8, "torus (uvicorn --workers 1, 8 threads)")
    finish_torus_jobs(ctx, run.pop("_job_ids"))
    web.stop()
    metrics.update({"run": run, "environment_end": environment()})
    return {"benchmark": "submit", "metrics": metrics, "peers": {}, "ratios": {}}


# -- main ------------------------------------------------------------------------------------------


def full_run(
    ctx,
    worker: Proc,
    logdir: Path,
    workdir: Path,
    n: int,
    args,
    metrics: dict,
    slurm_ids: list[str],
) -> dict:
    """The whole benchmark: the peers, Torus in every configuration, the reconcile RPCs."""
    # ---- peers first (then Torus; the sbatch loop again at the end, for drift)
    sb = sbatch_loop(n, workdir)
    slurm_ids += sb["_ids"]
    scancel(sb.pop("_ids"))
    wait_gone(slurm_ids)
    seq = restd(n, 1)
    slurm_ids += seq["_ids"]
    scancel(seq.pop("_ids"))
    wait_gone(slurm_ids)
    par = restd(n, 8)
    slurm_ids += par["_ids"]
    scancel(par.pop("_ids"))
    wait_gone(slurm_ids)

    # ---- Torus: uvicorn 1 worker vs 2, 8 client threads
    runs = {}
    for workers in (1, 2):
        web, port = serve(ctx, worker, logdir, workers=workers)
        warm_up(ctx, port)
        offset = worker.log_path.stat().st_size
        run = torus_phase(ctx, port, n, 8, f"torus (uvicorn --workers {workers}, 8 threads)")
        run["dispatch_tasks"] = dispatch_passes(worker, offset)
        runs[workers] = run
        finish_torus_jobs(ctx, run.pop("_job_ids"))
        web.stop()
    best = min(runs, key=lambda w: runs[w]["seconds"])
    head = runs[best]
    other = runs[3 - best]["seconds"]
    log(f"uvicorn --workers {best} is faster ({head['seconds']} s vs {other} s)")

    # ---- Torus, 1 client thread (with the faster web), then the reconcile RPC phases
    web, port = serve(ctx, worker, logdir, workers=best)
    warm_up(ctx, port)
    offset = worker.log_path.stat().st_size
    one = torus_phase(ctx, port, n, 1, f"torus (uvicorn --workers {best}, 1 thread)")
    one["dispatch_tasks"] = dispatch_passes(worker, offset)
    finish_torus_jobs(ctx, one.pop("_job_ids"))
    # ---- Torus through POST /api/v1/jobs/batch (a sweep: 50 specs a request, 4 threads)
    offset = worker.log_path.stat().st_size
    batched = torus_phase(ctx, port, n, 4, "torus batch (50 jobs a request, 4 threads)", batch=50)
    batched["dispatch_tasks"] = dispatch_passes(worker, offset)
    finish_torus_jobs(ctx, batched.pop("_job_ids"))
    spied = None
    if args.py_spy:  # an extra run under the sampler, reported apart from the timings
        spy = (
            pyspy_start(web.popen.pid, logdir / "pyspy-web.txt"),
            pyspy_start(worker.popen.pid, logdir / "pyspy-worker.txt"),
        )
        spied = torus_phase(ctx, port, n, 8, "torus under py-spy (not a headline figure)")
        for proc in spy:
            pyspy_stop(proc)
        finish_torus_jobs(ctx, spied.pop("_job_ids"))
    web.stop()
    plain = plain_http_ab(ctx, worker, logdir, n, best)
    web, port = serve(ctx, worker, logdir, workers=best)
    rpc_n = rpc_phase(ctx, port, n)
    rpc_10 = rpc_phase(ctx, port, 10)
    web.stop()
    sb_after = sbatch_loop(min(n, 100), workdir)
    slurm_ids += sb_after["_ids"]
    scancel(sb_after.pop("_ids"))
    wait_gone(slurm_ids)
    profile = profile_requests(ctx, 50)
    # the profile's jobs go out through the worker too; wait for their ids, then end them
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and active_bench_jobs(ctx["project"]).filter(attempts__backend_id="").exists()
    ):
        time.sleep(0.2)
    finish_torus_jobs(ctx)

    metrics.update(
        {
            "torus_seconds": head["seconds"],
            "torus_jobs_per_second": head["jobs_per_second"],
            "torus_seconds_1thread": one["seconds"],
            "torus_batch_seconds": batched["seconds"],
            "torus_batch_jobs_per_second": batched["jobs_per_second"],
            "torus_batch_request_latency_ms": batched["api_latency_ms"],
            "torus_jobs_per_second_1thread": one["jobs_per_second"],
            "uvicorn_workers": best,
            "torus_seconds_by_uvicorn_workers": {str(w): r["seconds"] for w, r in runs.items()},
            "api_latency_ms": head["api_latency_ms"],
            "api_latency_ms_first_tenth": head["api_latency_ms_first_tenth"],
            "api_latency_ms_last_tenth": head["api_latency_ms_last_tenth"],
            "api_latency_ms_1thread": one["api_latency_ms"],
            "api_seconds": head["api_seconds"],
            "api_seconds_1thread": one["api_seconds"],
            "tail_after_last_post_seconds": head["tail_after_last_post_seconds"],
            "submit_to_slurm_id_ms": head["submit_to_slurm_id_ms"],
            "dispatcher_jobs_per_second": head["dispatcher_jobs_per_second"],
            "dispatch_tasks": head["dispatch_tasks"],
            "http_errors": head["http_errors"] + one["http_errors"],
            "rejected": head["rejected"] + one["rejected"],
            "dispatch_kicks": sum(r["dispatch_kicks"] for r in [*runs.values(), one]),
            "runs": {f"workers{w}_threads8": r for w, r in runs.items()}
            | {f"workers{best}_threads1": one},
            "rpcs_per_reconcile_pass": rpc_n["rpcs_per_pass"],
            "rpcs_per_reconcile_pass_at_10": rpc_10["rpcs_per_pass"],
            "rpcs_per_reconcile_pass_net": rpc_n["rpcs_per_pass_net_of_background"],
            "rpcs_per_reconcile_pass_net_at_10": rpc_10["rpcs_per_pass_net_of_background"],
            "backend_calls_per_reconcile_pass": rpc_n["backend_calls_per_pass"],
            "backend_calls_per_reconcile_pass_at_10": rpc_10["backend_calls_per_pass"],
            "reconcile_stats_rpcs": rpc_n["stats_rpcs"],
            "reconcile_stats_rpcs_at_10": rpc_10["stats_rpcs"],
            "reconcile": {"at_n": rpc_n, "at_10": rpc_10},
            "profile": profile,
            "plain_http": plain,
            "environment_end": environment(),
        }
    )
    if args.py_spy:
        metrics["py_spy"] = {
            "run_seconds": spied["seconds"] if spied else None,
            "web": pyspy_summary(logdir / "pyspy-web.txt", MARKERS),
            "worker": pyspy_summary(logdir / "pyspy-worker.txt", MARKERS),
        }
    peers = {
        "sbatch_loop_seconds": sb["seconds"],
        "sbatch_loop_jobs_per_second": sb["jobs_per_second"],
        "sbatch_loop_jobs_per_second_after_torus": sb_after["jobs_per_second"],
        "restd_sequential_seconds": seq["seconds"],
        "restd_sequential_jobs_per_second": seq["jobs_per_second"],
        "restd_sequential_latency_ms": seq["latency_ms"],
        "restd_8threads_seconds": par["seconds"],
        "restd_8threads_jobs_per_second": par["jobs_per_second"],
        "restd_8threads_latency_ms": par["latency_ms"],
    }
    ratios = {
        "torus_vs_sbatch_loop": round(head["seconds"] / sb["seconds"], 3),
        "torus_vs_restd_8threads": round(head["seconds"] / par["seconds"], 3),
        "torus_vs_restd_sequential": round(head["seconds"] / seq["seconds"], 3),
        "torus_1thread_vs_sbatch_loop": round(one["seconds"] / sb["seconds"], 3),
        "torus_batch_vs_sbatch_loop": round(batched["seconds"] / sb["seconds"], 3),
        "torus_batch_vs_restd_8threads": round(batched["seconds"] / par["seconds"], 3),
        "rpcs_per_reconcile_pass_net_n_vs_10": round(
            rpc_n["rpcs_per_pass_net_of_background"]
            / max(1, rpc_10["rpcs_per_pass_net_of_background"]),
            3,
        ),
        "rpcs_per_reconcile_pass_n_vs_10": round(
            rpc_n["rpcs_per_pass"] / max(1, rpc_10["rpcs_per_pass"]), 3
        ),
    }
    return {"benchmark": "submit", "metrics": metrics, "peers": peers, "ratios": ratios}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 jobs instead of 500")
    parser.add_argument("--jobs", type=int, help="number of jobs per phase (default 500)")
    parser.add_argument(
        "--py-spy", action="store_true", help="sample web+worker in the headline run"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary log folder")
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="only the headline Torus round (no peers): its CPU per job by process",
    )
    parser.add_argument(
        "--platform-user",
        default="torus" if os.geteuid() == 0 else "root",
        help="the account the web server and worker run as (default torus, as scripts/portal"
        " runs them; root: as this process, as the portal ran its worker before issue 33)",
    )
    args = parser.parse_args()
    run_as(args.platform_user)
    n = args.jobs or (100 if args.quick else 500)
    logdir = Path(tempfile.mkdtemp(prefix="torus-bench-submit-"))
    workdir = logdir / "sbatch-cwd"
    workdir.mkdir()
    log(f"{n} jobs per phase; logs in {logdir}")

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    ctx = None
    slurm_ids: list[str] = []
    try:
        # ---- setup (not timed)
        manage("migrate", "--noinput", "--verbosity", "0")
        manage("cluster_register_local")
        django_setup()
        ctx = ensure_tenant(
            slug=TENANT_SLUG, project_slug=PROJECT_SLUG, owner=OWNER, token_name=TOKEN_NAME
        )
        clear_locks(ctx["cluster"].pk)
        controller_room(12 * n + 160 + 7 * WARM_JOBS + (n if args.py_spy else 0))
        sweep_leftovers()
        finish_torus_jobs(ctx)
        worker = start_worker(logdir)
        metrics: dict = {"jobs": n, "environment_start": environment()}

        if args.cpu_only:
            result = cpu_only(ctx, worker, logdir, n, metrics)
        else:
            result = full_run(ctx, worker, logdir, workdir, n, args, metrics, slurm_ids)
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        result = None
    finally:
        scancel([*slurm_ids, *OUR_IDS])
        if ctx is not None:
            with contextlib.suppress(Exception):
                finish_torus_jobs(ctx)  # while our worker still runs (cancel tasks)
        stop_all()
        if ctx is not None:
            from config.celery import app

            with contextlib.suppress(Exception):
                app.control.purge()  # nothing of ours left in the broker database
            with contextlib.suppress(Exception):
                drop_task_results()
        sweep_leftovers()
    return finish("submit", result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    sys.exit(main())
