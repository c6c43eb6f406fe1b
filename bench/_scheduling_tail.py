"""bench/scheduling.py's look at the tail (issue 39): the largest jobs' starts against the
plan's ideal packer (reference_starts, smallest first), and where each one's wait went: in
the platform before Slurm had it, and in Slurm's queue by its pending reason (Priority: jobs
ahead in the order; Resources: first in line, waiting for nodes; Assoc*: the tenant's limit)."""

import itertools
import statistics

LARGEST_SHARE = 0.05  # the largest 5 % of the window's jobs by expected GPU-time
GAP_CAP_S = 5.0  # a sampling gap longer than this is not counted to the reason before it


def largest(plan: list) -> list:
    ranked = sorted(plan, key=lambda j: (-j.gpus * j.time_limit_min, j.arrival, j.index))
    return ranked[: max(1, round(len(plan) * LARGEST_SHARE))]


def tail_report(
    plan: list,
    runs: dict,
    *,
    t0: float,
    ideal: dict,
    platform_s: dict | None = None,
    reasons: dict | None = None,
) -> dict:
    """runs: {index: (submitted, start, end)} (epoch seconds); ideal: {index: start after t0};
    platform_s: {index: seconds from the API's answer to the job in Slurm}; reasons: {index:
    [(sampled at, reason), ...]} from squeue while it waited."""
    last_arrival = max(j.arrival for j in plan)
    rows, by_reason = [], {}
    for job in largest(plan):
        _, start, _ = runs.get(job.index, (None, None, None))
        row = {"index": job.index, "gpus": job.gpus, "arrival_s": job.arrival,
               "ideal_start_s": round(ideal[job.index], 1)}  # fmt: skip
        if start:
            row["start_s"] = round(start - t0, 1)
            row["late_s"] = round(row["start_s"] - row["ideal_start_s"], 1)
            row["after_last_arrival"] = row["start_s"] > last_arrival
        if platform_s and job.index in platform_s:
            row["platform_s"] = round(platform_s[job.index], 1)
        if reasons and job.index in reasons:
            row["slurm_reasons_s"] = _durations(reasons[job.index])
            for reason, seconds in row["slurm_reasons_s"].items():
                by_reason[reason] = by_reason.get(reason, 0.0) + seconds
        rows.append(row)
    started = [r for r in rows if "start_s" in r]
    late = [r["late_s"] for r in started]
    summary = {
        "jobs": len(rows),
        "never_started": len(rows) - len(started),
        "late_mean_s": round(statistics.fmean(late), 1) if late else None,
        "late_max_s": max(late) if late else None,
        "started_after_last_arrival": sum(1 for r in started if r["after_last_arrival"]),
        "ideal_after_last_arrival": sum(1 for r in rows if r["ideal_start_s"] > last_arrival),
    }
    if platform_s:
        waits = [r["platform_s"] for r in rows if "platform_s" in r]
        summary["platform_mean_s"] = round(statistics.fmean(waits), 1) if waits else None
    if by_reason:
        summary["slurm_reasons_s"] = {k: round(v, 1) for k, v in sorted(by_reason.items())}
    return {"summary": summary, "jobs": rows}


def _durations(samples: list) -> dict:
    """Seconds per reason: each sample's reason holds until the next sample (capped)."""
    out: dict = {}
    for (at, reason), (after, _) in itertools.pairwise(samples):
        out[reason] = round(out.get(reason, 0.0) + min(after - at, GAP_CAP_S), 1)
    return out
