"""bench/scheduling.py's report: the picture and the plan's ideal schedules."""

from pathlib import Path

from _scheduling_cluster import log
from _scheduling_trace import allocation_bound, reference_schedule

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
