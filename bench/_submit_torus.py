"""bench/submit.py's Torus phase: jobs through the REST API, served and timed."""

import contextlib
import http.client
import json
import os
import re
import threading
import time
from pathlib import Path

from _common import cpu_parts, cpu_per_job, percentiles
from _submit_platform import finish_torus_jobs
from _submit_slurm import CPU_BY_COMM, POLL_S, WARM_JOBS, log

from scripts.devstack import Proc, start_web

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
