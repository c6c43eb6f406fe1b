"""What the expected starts keep in Redis and how they read back. Each control pass writes
one hash per cluster (apps/jobs/estimates.py): per waiting job its predicted wait and the
basis of its run time, and a meta field with the pass's time, the calibration's factors per
bin of wait and the partitions' summaries. Read here: a page of jobs' expected starts
(estimates_read) and where a new job would start soonest (soonest)."""

import bisect
import json
import math
from datetime import UTC, datetime

from django.utils import timezone

from apps.core.generations import counter_key, redis_client
from apps.jobs.states import State

WAITING = (State.PENDING, State.QUEUED, State.SUBMITTED, State.RESTARTING)
# S, added to every wait before it is compared: a start is seen to the pass (a few seconds), so
# a 4 s start predicted for now is no miss at all (the bins keep such small waits' relative
# misses out of the long waits' range)
SMOOTH_SECONDS = 5.0
# predicted waits calibrated apart: at once (this pass), < 1 min, < 10 min, < 1 h, more
BINS = (1.0, 60.0, 600.0, 3600.0)
META = "_"  # the hash's field that holds what its entries share


def store_key(kind: str, cluster_id) -> str:
    """now (the pass's hash), first (first predictions), due (their p90s), residuals:<bin>."""
    return counter_key(f"estimates:{kind}:{cluster_id}")


def bin_of(wait: float) -> int:
    """The calibration's bin of a predicted wait (Mondrian conformal: a start predicted for
    now and one predicted hours away miss by different amounts, and the first are many)."""
    return bisect.bisect_right(BINS, wait)


def range_of(clock: float, wait: float, factors_by_bin: list) -> tuple[float, float, float]:
    """p10, p50 and p90 of a start predicted `wait` seconds after `clock`: the wait, smoothed,
    scaled by its bin's calibration factors (never before `clock`)."""
    smoothed = wait + SMOOTH_SECONDS
    factors = factors_by_bin[bin_of(wait)]
    return tuple(clock + max(0.0, smoothed * factor - SMOOTH_SECONDS) for factor in factors)


def estimates_read(*, jobs) -> dict[str, dict]:
    """{job id: expected_start} for the waiting ones among `jobs`, one HMGET per cluster;
    ISO times, as the API gives them."""
    client = redis_client()
    by_cluster: dict = {}
    for job in jobs:
        if job.state in WAITING and job.cluster_id:
            by_cluster.setdefault(job.cluster_id, []).append(str(job.pk))
    if client is None or not by_cluster:
        return {}
    with client.pipeline(transaction=False) as pipe:
        for cluster_id, ids in by_cluster.items():
            pipe.hmget(store_key("now", cluster_id), [META, *ids])
        answers = pipe.execute()
    found = {}
    for ids, (meta, *values) in zip(by_cluster.values(), answers, strict=True):
        if meta is None:
            continue
        meta = json.loads(meta)
        for job_id, raw in zip(ids, values, strict=True):
            if raw is not None:
                found[job_id] = _readable(raw.decode(), meta)
    return found


def _readable(stored: str, meta: dict) -> dict:
    computed_at = _iso(meta["computed_at"])
    if stored.startswith("! "):
        return {
            **dict.fromkeys(("p10", "p50", "p90")),
            "computed_at": computed_at,
            "basis": "",
            "cannot_start": stored[2:],
        }
    wait, basis = stored.split()
    p10, p50, p90 = range_of(meta["computed_at"], float(wait), meta["factors"])
    return {
        "p10": _iso(p10),
        "p50": _iso(p50),
        "p90": _iso(p90),
        "computed_at": computed_at,
        "basis": (
            f"the queue played forward, its run time from {meta['bases'][int(basis)]};"
            f" running jobs' ends from their past runs; range {meta['range'][bin_of(float(wait))]}"
        ),
        "cannot_start": "",
    }


def _iso(value) -> str:
    return datetime.fromtimestamp(float(value), UTC).isoformat()


def soonest(*, options: list[tuple], gpus: int, cpus: int) -> tuple[int, str]:
    """Which of `options` ((cluster, partition) pairs) a new job needing `gpus` and `cpus`
    is expected to start on soonest, from the last pass's summaries (one Redis round trip),
    and why, in words: at once where enough is free, else behind the partition's queue."""
    client = redis_client()
    metas = [None] * len(options)
    if client is not None:
        with client.pipeline(transaction=False) as pipe:
            for cluster, _ in options:
                pipe.hget(store_key("now", cluster.pk), META)
            metas = pipe.execute()
    now = timezone.now().timestamp()
    waits, words = [], []
    for (cluster, partition), meta in zip(options, metas, strict=True):
        meta = json.loads(meta) if meta else {}
        pool = meta.get("pools", {}).get(partition)
        where = f"{cluster.name}/{partition}"
        if not meta.get("healthy", True):  # as of the last pass (`cluster` may be cached)
            waits.append(math.inf)
            words.append(f"{where} does not answer")
        elif pool is None:
            waits.append(math.inf)
            words.append(f"{where} not estimated yet")
        elif pool["free"][0] >= gpus and pool["free"][1] >= cpus:
            waits.append(0.0)
            words.append(f"{where} at once ({pool['free'][0]} GPUs free)")
        else:
            wait = max(0.0, pool["drain_at"] - now)
            waits.append(wait)
            words.append(f"{where} in ~{_minutes(wait)} (behind {pool['waiting']} waiting)")
    best = min(range(len(options)), key=lambda i: (waits[i], i))
    others = "; ".join(words[i] for i in range(len(options)) if i != best)
    return best, f"expected to start soonest here: {words[best]}; elsewhere: {others}"


def _minutes(seconds: float) -> str:
    minutes = seconds / 60
    if minutes < 90:
        return f"{max(1, round(minutes))} min"
    if minutes < 48 * 60:
        return f"{round(minutes / 60)} h"
    return f"{round(minutes / 1440)} d"
