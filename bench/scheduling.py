"""Scheduling quality on the real ITP trace: Torus's admission in front of Slurm, beside
Slurm alone (FIFO + backfill, multifactor fair share) and plain FIFO, on one big emulated
Slurm cluster (platform/services/components/slurm-bench). See bench/README.md.

Every phase replays the same jobs (same arrival times, GPUs, durations) on the same cluster,
one phase after the other; the last stdout line is the JSON result, and a PNG (allocation
over time, completion-time distributions) is written beside it.
"""

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TORUS_REDIS_DB_BASE", "13")  # its own broker/cache DBs (13-15)
# a trace hour is 5 s here: the run-time history is read as often as a minute is on a cluster
os.environ.setdefault("TORUS_ESTIMATE_HISTORY_SECONDS", "2")
# its cluster is driven by its own processes only, not by a portal running on the same database
os.environ.setdefault("TORUS_CONTROL_PLANE", "bench-scheduling")

from _common import ROOT, django_setup, environment, finish
from _scheduling_cluster import (
    CLUSTER_NAME,
    DEFAULT_TRACE,
    EXTRA_PHASES,
    PHASES,
    STOP,
    BenchSlurm,
    log,
    machine,
    slurm_mode,
)
from _scheduling_load import MachineLoad
from _scheduling_replay import slurm_phase
from _scheduling_report import plan_summary, plot, run_figures, run_ratios, spread
from _scheduling_torus import (
    forget_cluster,
    fresh_db,
    past_runs,
    quota_mode,
    reconnecting,
    start_platform,
    torus_phase,
    torus_setup,
)
from _scheduling_trace import (
    TENANTS,
    allocation_bound,
    busiest_window,
    read_trace,
    reference_starts,
    replay_plan,
)

from scripts.devstack import stop_all

# -- main -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="32 nodes, a 12 h window")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--trace-cluster", default="cluster04")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--window-hours", type=float)
    parser.add_argument("--window-start-hour", type=float, help="default: the busiest window")
    parser.add_argument("--compression", type=float, default=720.0, help="trace s per real s")
    parser.add_argument("--load", type=float, default=1.0, help="arrival-rate multiplier")
    parser.add_argument(
        "--plan-only",
        metavar="LOADS",
        help="no services: per load (comma list) one JSON line with the plan's allocation bound,"
        " JCT floor and two ideal no-latency schedules (FIFO, smallest first), then exit",
    )
    parser.add_argument(
        "--plan-starving",
        metavar="SECONDS",
        help="with --plan-only: also the ideal smallest-first schedule with the platform's"
        " starving rule, one per wait (comma list of real seconds)",
    )
    parser.add_argument(
        "--plan-windows",
        metavar="HOURS",
        help="with --plan-only: every window of these lengths (comma list), starting every"
        " 3 trace hours, instead of the one window",
    )
    parser.add_argument(
        "--cap-hours", type=float, help="longest job, trace hours (default: window)"
    )
    parser.add_argument("--drain", type=float, help="real seconds after the last arrival")
    parser.add_argument(
        "--history-hours",
        type=float,
        default=72.0,
        help="trace hours before the window written as the platform's ended runs, which the"
        " expected starts learn run times from (0: none, a platform's first day)",
    )
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument(
        "--torus-slurm-limits",
        action="store_true",
        help="also a Torus phase with tenant quotas as Slurm GrpTRES limits",
    )
    parser.add_argument(
        "--size-nice",
        type=float,
        help="Cluster.config size_nice for the Torus phases (default: the platform's, 1000)",
    )
    parser.add_argument(
        "--keep-records",
        action="store_true",
        help="keep the job records of earlier phases in slurmctld (default: cleared per phase)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the phases N times: every figure's median and range, the median run's plot",
    )
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--keep-cluster", action="store_true", help="leave slurm-bench running")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    nodes = args.nodes or (32 if args.quick else 64)
    hours = args.window_hours or (12.0 if args.quick else 24.0)
    cap = args.cap_hours or hours
    drain = args.drain or (150.0 if args.quick else 300.0)
    phases = [p for p in args.phases.split(",") if p]
    for p in phases:
        if p not in PHASES + EXTRA_PHASES:
            parser.error(f"unknown phase {p}")
    if args.torus_slurm_limits and "torus-limits" not in phases:
        phases.append("torus-limits")

    trace = read_trace(args.trace, args.trace_cluster)
    start = (
        args.window_start_hour * 3600
        if args.window_start_hour is not None
        else busiest_window(trace, hours, cap * 3600)
    )

    def plan_at(load: float, *, at: float = start, hours: float = hours):
        return replay_plan(
            trace, cluster=args.trace_cluster, window_start=at, window_hours=hours,
            compression=args.compression, load=load, keep_fraction=min(1.0, nodes / 64),
            node_gpus=args.gpus_per_node, nodes=nodes, cap_hours=cap, prefix="",
        )  # fmt: skip

    capacity = nodes * args.gpus_per_node
    if args.plan_only:
        loads = [float(x) for x in args.plan_only.split(",")]
        waits = [float(x) for x in (args.plan_starving or "").split(",") if x]
        windows = [(start, hours)]
        if args.plan_windows:
            first = int(trace[0].submit // 3600) * 3600
            windows = [
                (float(at), float(length))
                for length in args.plan_windows.split(",")
                for at in range(first, int(trace[-1].submit - float(length) * 3600) + 1, 3 * 3600)
            ]
        for at, length in windows:
            for load in loads:
                plan, info = plan_at(load, at=at, hours=length)
                if not plan:
                    continue
                line = {"load": load, "window_start_hour": at / 3600, "window_hours": length}
                line["cap_hours"] = cap
                line.update(
                    plan_summary(plan, info, nodes=nodes, node_gpus=args.gpus_per_node, waits=waits)
                )
                print(json.dumps(line), flush=True)
        return 0
    plan, info = plan_at(args.load)
    info["gpu_allocation_bound"] = allocation_bound(plan, capacity=capacity)
    log(
        f"{args.trace_cluster} window {start / 3600:.0f}-{start / 3600 + hours:.0f} h: "
        f"{info['jobs']} jobs, offered load {info['offered_load']} over "
        f"{info['replay_seconds']} s, {capacity} GPUs, allocation bound "
        f"{info['gpu_allocation_bound']}, JCT floor {info['jct_floor_s']} s"
    )
    logdir = Path(f"/tmp/bench-scheduling-{os.getpid()}")  # noqa: S108
    logdir.mkdir(parents=True, exist_ok=True)
    slurm = BenchSlurm(nodes, args.gpus_per_node)

    def on_signal(signum, frame):
        STOP.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result, procs = None, []
    try:
        slurm.up()
        django_setup()
        from django.db import connections

        env_start = environment()
        ctx = torus_setup(slurm, capacity) if any(p.startswith("torus") for p in phases) else None
        quotas = (
            ctx["quotas"] if ctx else {n: max(8, round(q * capacity)) for n, _, q, _ in TENANTS}
        )
        slurm.accounts(quotas, limits=False)
        history, past_s = None, args.history_hours * 3600
        ideal = reference_starts(plan, nodes=nodes, node_gpus=args.gpus_per_node, order="smallest")

        def run_phase(phase: str) -> dict:
            nonlocal history, procs, port
            fresh_db(connections)  # PostgreSQL may have dropped idle connections meanwhile
            slurm.mode(slurm_mode(phase), clear=not args.keep_records)
            if not phase.startswith("torus"):
                load = MachineLoad().start()
                return {**slurm_phase(slurm, phase, plan, drain), "machine_load": load.stop()}
            reconnecting(
                lambda: quota_mode(
                    ctx,
                    slurm,
                    in_slurm=phase.startswith(("torus-limits", "torus-lend")),
                    borrow=phase.startswith(("torus-borrow", "torus-lend")),
                    size_nice=0 if phase.endswith("-nonice") else args.size_nice,
                )
            )
            if history is None:
                history, _ = plan_at(args.load, at=start - past_s, hours=args.history_hours)
                written = reconnecting(lambda: past_runs(ctx, history, cluster=ctx["cluster"]))
                log(f"{written} past runs from the {args.history_hours:g} trace hours before")
            if not procs:
                port, procs = start_platform(logdir)
            load = MachineLoad({p.name: p.popen.pid for p in procs}).start()
            out = torus_phase(slurm, ctx, plan, drain, port, phase)
            return {**out, "machine_load": load.stop()}

        runs, port = [], None  # runs: per repeat, {"metrics", "series", "jcts"} by phase
        for rep in range(args.repeat):
            raw, platform = {}, {}
            for phase in phases:
                raw[phase] = run_phase(phase)
                if "platform" in raw[phase]:
                    platform[phase] = raw[phase].pop("platform")
                log(f"{phase} (run {rep + 1} of {args.repeat}): {raw[phase]['machine_load']}")
            (logdir / f"runs-{rep + 1}.json").write_text(
                json.dumps({k: {**v, "reasons": None} for k, v in raw.items()})
            )
            runs.append(
                run_figures(plan, raw, platform, ideal=ideal, info=info, capacity=capacity,
                            scale=args.compression / 3600)
            )  # fmt: skip
            for phase, m in runs[-1]["metrics"].items():
                log(f"{phase} (run {rep + 1} of {args.repeat}): {json.dumps(m)}")
        for proc in procs:
            proc.stop()
        heads = ("torus-lend", "torus-limits", "torus-borrow", "torus")
        torus = [p for p in phases if p.startswith("torus")]  # e.g. torus-lend-noreserve
        head = next((p for p in (*heads, *torus) if p in runs[0]["metrics"]), phases[0])
        median_run = sorted(runs, key=lambda r: r["metrics"][head]["gpu_allocation"])[
            (len(runs) - 1) // 2
        ]
        metrics = median_run["metrics"]
        ratios = [run_ratios(r["metrics"], head=head, info=info) for r in runs]
        stamp = time.strftime("%Y%m%d-%H%M%S")
        args.out.mkdir(parents=True, exist_ok=True)
        png = plot(
            args.out / f"scheduling-{stamp}.png", median_run["series"], median_run["jcts"],
            f"ITP {args.trace_cluster}, {hours:g} h window at {args.compression:g}x, load "
            f"{args.load:g}: {len(plan)} jobs on {nodes} x {args.gpus_per_node} GPUs"
            + (f" (the median of {len(runs)} runs)" if len(runs) > 1 else ""),
        )  # fmt: skip
        result = {
            "benchmark": "scheduling",
            "metrics": {
                "headline": head,
                "by_scheduler": metrics,  # the median run's (by the headline's allocation)
                "repeats": len(runs),
                "spread": spread([r["metrics"] for r in runs]),
                "runs": [r["metrics"] for r in runs],
                "trace": {
                    "file": args.trace.name,
                    "cluster": args.trace_cluster,
                    "window_start_hour": start / 3600,
                    "window_hours": hours,
                    "compression": args.compression,
                    "load": args.load,
                    "cap_hours": cap,
                    "drain_s": drain,
                    **info,
                },
                "cluster": {
                    "nodes": nodes,
                    "gpus_per_node": args.gpus_per_node,
                    "quotas_gpus": quotas,
                    **machine(slurm),
                },
                "environment_start": env_start,
                "environment_end": environment(),
                "plot": png,
            },
            "peers": {p: metrics[p] for p in metrics if not p.startswith("torus")},
            "ratios": ratios[runs.index(median_run)],
            "ratios_spread": spread([{"ratios": r} for r in ratios])["ratios"],
        }
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        STOP.set()
        stop_all()
        if not args.keep_cluster:
            slurm.stop()
            try:
                from django.db import connections

                fresh_db(connections)
                forget_cluster()
            except Exception as exc:  # reported; the result line still comes
                log(f"could not remove the cluster row {CLUSTER_NAME}: {exc}")
    return finish("scheduling", result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    sys.exit(main())
