"""bench/submit.py's peers (an sbatch loop, slurmrestd) and the reconcile RPCs."""

import statistics
import subprocess
import threading
import time
from pathlib import Path

from _common import percentiles
from _submit_platform import finish_torus_jobs, reconcile_pass
from _submit_slurm import OUR_IDS, PASSES, SBATCH, SLURM, SLURM_ENV, log, sdiag_rpcs, slurm
from _submit_torus import torus_phase

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
