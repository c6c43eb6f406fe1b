"""How far past expected starts missed, per cluster: the calibration apps/jobs/estimates.py
scales each predicted wait by. Each job's first prediction is kept (store_key("first")); when
it starts, log((actual wait + S) / (predicted wait + S)) joins its bin's last RESIDUALS_KEPT
residuals, the start is counted as within, early or late of the first range (/metrics), and
the range's miss level is steered by it (_steer). The jobs still waiting past their first p90
are told once (waiting_too_long)."""

import math

from apps.core import telemetry
from apps.jobs.estimate_store import BINS, SMOOTH_SECONDS, bin_of, store_key

CALIBRATION_MIN = 20
RESIDUALS_KEPT = 1000
UNCALIBRATED = (math.log(0.5), 0.0, math.log(2.0))
SWEEP_SLACK = 1000
# Adaptive conformal inference (Gibbs and Candes, 2021): the ranges leave out `level` of the
# residuals (MISS_AIM at first), and every start seen steers it, a miss down by GAMMA x 0.8
# (wider), a hit up by GAMMA x 0.2: the misses stay near MISS_AIM of all starts over time even
# while the queue's behaviour shifts (its residuals are not exchangeable).
MISS_AIM = 0.2
GAMMA = 0.01
LEVEL_BOUNDS = (0.0, 0.6)

OUTCOMES = telemetry.counter(
    "torus_start_estimates",
    "Jobs that started, by where the start fell against the p10-p90 range first predicted for"
    " them: within, early or late (coverage = within / all; the aim is 80%)",
    labels=("cluster", "outcome"),
)


def calibration(client, cluster_id) -> tuple[list, list]:
    """Per bin, the factors for p10, p50 and p90 and the words for where they come from: the
    bin's residuals, or while it has too few, every bin's of jobs predicted to wait (the many
    predicted to start at once, nearly always right, would narrow the range of the others)."""
    with client.pipeline(transaction=False) as pipe:
        for index in range(len(BINS) + 1):
            pipe.lrange(store_key(f"residuals:{index}", cluster_id), 0, -1)
        pipe.get(store_key("level", cluster_id))
        *by_bin, level = pipe.execute()
    by_bin = [sorted(float(r) for r in rows) for rows in by_bin]
    level = MISS_AIM if level is None else float(level)
    waited = sorted(r for rows in by_bin[1:] for r in rows)
    pooled = (sorted(waited + by_bin[0]), *[waited] * len(BINS))
    found = [
        _scale(rows if len(rows) >= CALIBRATION_MIN else pool, level)
        for rows, pool in zip(by_bin, pooled, strict=True)
    ]
    return [factors for factors, _ in found], [words for _, words in found]


def _scale(residuals: list[float], level: float) -> tuple[tuple, str]:
    """The factors for p10, p50 and p90 (the residuals' level/2 and 1 - level/2 quantiles:
    the 10th and 90th while the misses keep to their aim), and the words for where they come
    from. `residuals` sorted."""
    if len(residuals) < CALIBRATION_MIN:
        return tuple(math.exp(r) for r in UNCALIBRATED), (
            f"0.5x-2x, uncalibrated ({len(residuals)} of {CALIBRATION_MIN} past starts seen)"
        )
    factors = tuple(math.exp(_quantile(residuals, at)) for at in (level / 2, 0.5, 1 - level / 2))
    return factors, f"calibrated on {len(residuals)} past starts"


def _quantile(ordered: list[float], at: float) -> float:
    """The `at` quantile of sorted values, interpolated (0: the least, 1: the most)."""
    place = at * (len(ordered) - 1)
    low = int(place)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (place - low)


def learn(client, *, cluster_id, cluster_name: str, started: dict[str, float]) -> int:
    """The jobs whose attempts started since the last pass (`started`: job id -> its start,
    epoch seconds): each with a first prediction adds its residual and its coverage outcome,
    and the prediction is dropped. Returns how many were learned."""
    if not started:
        return 0
    first_key = store_key("first", cluster_id)
    ids = list(started)
    firsts = dict(zip(ids, client.hmget(first_key, ids), strict=True))
    residuals, misses = [], []
    for job_id, first in firsts.items():
        if first is None:
            continue
        at, wait, p10, p90 = (float(x) for x in first.split())
        actual = started[job_id]
        if actual < at - 1:
            continue  # a start from before this wait
        residual = math.log((actual - at + SMOOTH_SECONDS) / (wait + SMOOTH_SECONDS))
        residuals.append((bin_of(wait), residual))
        outcome = "early" if actual < p10 - 1 else "late" if actual > p90 + 1 else "within"
        telemetry.add(OUTCOMES, cluster=cluster_name, outcome=outcome)
        misses.append(outcome != "within")
    learned = [job_id for job_id, first in firsts.items() if first is not None]
    if misses:
        _steer(client, cluster_id=cluster_id, misses=misses)
    if learned:
        with client.pipeline(transaction=False) as pipe:
            for index, residual in residuals:
                residuals_key = store_key(f"residuals:{index}", cluster_id)
                pipe.lpush(residuals_key, residual)
                pipe.ltrim(residuals_key, 0, RESIDUALS_KEPT - 1)
            pipe.hdel(first_key, *learned)
            pipe.zrem(store_key("due", cluster_id), *learned)
            pipe.execute()
    return len(residuals)


def _steer(client, *, cluster_id, misses: list[bool]) -> None:
    """The range's miss level after these starts (ACI: level += GAMMA x (MISS_AIM - missed)),
    kept within LEVEL_BOUNDS."""
    key = store_key("level", cluster_id)
    level = client.get(key)
    level = MISS_AIM if level is None else float(level)
    for missed in misses:
        level = min(max(level + GAMMA * (MISS_AIM - missed), LEVEL_BOUNDS[0]), LEVEL_BOUNDS[1])
    client.set(key, repr(level))


def forget_gone(client, *, cluster_id, waiting: set[str]) -> None:
    """Drop the first predictions of jobs that left the queue without starting (cancelled,
    failed at dispatch): swept once they outnumber the waiting jobs by SWEEP_SLACK."""
    first_key = store_key("first", cluster_id)
    if client.hlen(first_key) <= len(waiting) + SWEEP_SLACK:
        return
    gone = [key for key in client.hkeys(first_key) if key.decode() not in waiting]
    if gone:
        client.hdel(first_key, *gone)
        client.zrem(store_key("due", cluster_id), *gone)


def waiting_too_long(client, *, cluster_id, waiting: set[str], clock: float) -> list[str]:
    """The jobs still waiting past the p90 first predicted for them, each once (taken off the
    cluster's due set as they are returned; one that left the queue meanwhile is dropped)."""
    due_key = store_key("due", cluster_id)
    due = [key.decode() for key in client.zrangebyscore(due_key, "-inf", clock)]
    if not due:
        return []
    client.zrem(due_key, *due)
    return [job_id for job_id in due if job_id in waiting]
