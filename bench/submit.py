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
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    django_setup,
    ensure_tenant,
    environment,
    finish,
    manage,
    pyspy_start,
    pyspy_stop,
    pyspy_summary,
)
from _submit_peers import restd, rpc_phase, sbatch_loop
from _submit_platform import (
    active_bench_jobs,
    clear_locks,
    drop_task_results,
    finish_torus_jobs,
    start_worker,
)
from _submit_profile import profile_requests
from _submit_slurm import (
    OUR_IDS,
    OWNER,
    PROJECT_SLUG,
    TENANT_SLUG,
    TOKEN_NAME,
    WARM_JOBS,
    controller_room,
    log,
    scancel,
    sweep_leftovers,
    wait_gone,
)
from _submit_torus import dispatch_passes, plain_http_ab, serve, torus_phase, warm_up

from scripts.devstack import Proc, run_as, stop_all

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
    ("placements_fitting ", "placements_fitting"),
    ("soonest ", "soonest"),
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
