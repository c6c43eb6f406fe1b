"""bench/scheduling.py's report: each run's figures, their spread over runs, the picture
and the plan's ideal schedules."""

import statistics
from pathlib import Path

from _scheduling_cluster import log
from _scheduling_tail import tail_report
from _scheduling_trace import (
    allocation_bound,
    allocation_series,
    phase_metrics,
    reference_schedule,
)

PEERS = ("backfill", "fairshare", "fifo")

# -- one run, many runs -----------------------------------------------------------------------


def run_figures(
    plan, raw: dict, platform: dict, *, ideal: dict, info: dict, capacity: int, scale: float
) -> dict:
    """One run of the phases: {"metrics", "series", "jcts"}, each by phase. `raw`: each
    phase's {t0, deadline, runs, machine_load, platform_s?, reasons?}."""
    metrics, series, jcts = {}, {}, {}
    for phase, out in raw.items():
        m = phase_metrics(plan, out["runs"], capacity=capacity, t0=out["t0"],
                          deadline=out["deadline"], scale=scale,
                          window_s=info["replay_seconds"])  # fmt: skip
        m["machine_load"] = out["machine_load"]  # the machine is shared: how busy it was
        if phase in platform:
            m["platform"] = platform[phase]
        m["largest_jobs"] = tail_report(
            plan, out["runs"], t0=out["t0"], ideal=ideal,
            platform_s=out.get("platform_s"), reasons=out.get("reasons"),
        )  # fmt: skip
        metrics[phase] = m
        series[phase] = allocation_series(
            plan, out["runs"], capacity=capacity, t0=out["t0"], deadline=out["deadline"]
        )
        jcts[phase] = [e - s for s, st, e in out["runs"].values() if st and e]
    return {"metrics": metrics, "series": series, "jcts": jcts}


def run_ratios(metrics: dict, *, head: str, info: dict) -> dict:
    """The headline phase against each peer of the same run."""
    ratios = {}
    t = metrics.get(head)
    for peer in PEERS:
        if not t or peer not in metrics or not metrics[peer]["jct_mean_s"] or not t["jct_mean_s"]:
            continue
        p = metrics[peer]
        ratios[f"jct_mean_torus_vs_{peer}"] = round(t["jct_mean_s"] / p["jct_mean_s"], 3)
        # the best any scheduler could do (no job waiting), for scale
        ratios[f"jct_floor_vs_{peer}"] = round(info["jct_floor_s"] / p["jct_mean_s"], 3)
        if p["queue_delay_p95_s"]:
            ratios[f"queue_p95_torus_vs_{peer}"] = round(
                t["queue_delay_p95_s"] / p["queue_delay_p95_s"], 3
            )
        ratios[f"allocation_torus_minus_{peer}"] = round(
            t["gpu_allocation"] - p["gpu_allocation"], 3
        )
    return ratios


def spread(runs: list[dict]) -> dict:
    """Every number found at the same place in each of `runs`: its median, min and max."""
    out = {}
    for key, first in runs[0].items():
        values = [run.get(key) for run in runs]
        if isinstance(first, dict):
            inner = spread([v for v in values if isinstance(v, dict)])
            if inner:
                out[key] = inner
        elif isinstance(first, int | float) and not isinstance(first, bool):
            numbers = [v for v in values if isinstance(v, int | float)]
            out[key] = {
                "median": round(statistics.median(numbers), 3),
                "min": min(numbers),
                "max": max(numbers),
            }
    return out


# -- the picture ------------------------------------------------------------------------------


def plot(path: Path, series: dict, jcts: dict, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib (pip install -e '.[bench]'): no PNG")
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for name, points in series.items():
        ax1.plot([p[0] for p in points], [100 * p[1] for p in points], label=name, lw=1.2)
    ax1.set_xlabel("seconds since the replay started")
    ax1.set_ylabel("GPUs allocated (%)")
    ax1.set_ylim(0, 105)
    ax1.legend()
    ax1.set_title("GPU allocation over time")
    names = list(jcts)
    ax2.boxplot([jcts[n] or [0] for n in names], tick_labels=names, showfliers=True, whis=(5, 95))
    ax2.set_ylabel("job completion time (s)")
    ax2.set_yscale("log")
    ax2.set_title("completion times (box: quartiles, whiskers: p5-p95)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


# -- the plan ---------------------------------------------------------------------------------


def plan_summary(plan, info: dict, *, nodes: int, node_gpus: int, waits: list[float]) -> dict:
    """What a plan allows before any run: its allocation bound and JCT floor, and the ideal
    no-latency schedules (FIFO, smallest first, smallest first with the starving rule)."""

    def ideal(order: str, starving_s=None) -> dict:
        return reference_schedule(
            plan, nodes=nodes, node_gpus=node_gpus, order=order, starving_s=starving_s
        )

    fifo, smallest = ideal("fifo"), ideal("smallest")
    line = {
        "nodes": nodes,
        **{k: info[k] for k in ("jobs", "replay_seconds", "offered_load", "jct_floor_s")},
        "gpu_allocation_bound": allocation_bound(plan, capacity=nodes * node_gpus),
        "jct_floor_vs_ideal_fifo": round(info["jct_floor_s"] / fifo["jct_mean_s"], 3),
        "ideal_fifo": fifo,
        "ideal_smallest_first": smallest,
        "ideal_smallest_vs_fifo_jct": round(smallest["jct_mean_s"] / fifo["jct_mean_s"], 3),
    }
    if waits:
        line["ideal_smallest_starving"] = {f"{w:g}": ideal("smallest", w) for w in waits}
    return line
