"""The ITP trace for bench/scheduling.py: reading it, choosing the busy window, assigning
tenants and users, compressing time; and the scheduling metrics. Pure functions, no services.

Assignment (deterministic, the same on every machine): sha256 of "tenant:<cluster>:<job_id>"
read as an integer, modulo 100, picks the tenant by cumulative share (TENANTS below: 40/30/20/10
per cent of the jobs); sha256 of "user:<cluster>:<job_id>" modulo USERS_PER_TENANT picks the
user in it. A job's GPUs become nodes x GPUs per node: up to one node's GPUs on one node,
more as whole nodes (16 GPUs = 2 x 8).
"""

import csv
import hashlib
import io
import math
import statistics
import tarfile
from dataclasses import dataclass
from pathlib import Path

# name, share of the jobs (%), GPU quota as a fraction of the cluster's GPUs, fair share
TENANTS = [
    ("sched-a", 40, 0.50, 50),
    ("sched-b", 30, 0.40, 40),
    ("sched-c", 20, 0.30, 30),
    ("sched-d", 10, 0.20, 20),
]
USERS_PER_TENANT = 2


@dataclass
class TraceJob:
    job_id: str
    submit: float  # trace seconds from the start of collection
    duration: float  # trace seconds
    gpus: int


@dataclass
class ReplayJob:
    index: int
    job_id: str
    tenant: str
    user: str
    arrival: float  # real seconds after the replay starts
    duration: float  # real seconds the job sleeps
    gpus: int
    nodes: int
    gpus_per_node: int
    time_limit_min: int


def read_trace(path: Path, cluster: str) -> list[TraceJob]:
    """One cluster's CSV from raw-traces.tar.gz (or a directory holding clusterNN.csv)."""
    path = Path(path)
    if path.is_dir():
        text = (path / f"{cluster}.csv").read_text()
    else:
        with tarfile.open(path) as tar:
            member = next(m for m in tar.getmembers() if Path(m.name).name == f"{cluster}.csv")
            text = tar.extractfile(member).read().decode()
    jobs = []
    for row in csv.DictReader(io.StringIO(text)):
        jobs.append(
            TraceJob(
                job_id=row["job_id"],
                submit=float(row["submission_time"]),
                duration=float(row["duration"]),
                gpus=max(1, int(float(row["num_gpu"]))),
            )
        )
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return jobs


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def tenant_of(cluster: str, job_id: str) -> str:
    bucket, edge = _hash(f"tenant:{cluster}:{job_id}") % 100, 0
    for name, share, _, _ in TENANTS:
        edge += share
        if bucket < edge:
            return name
    return TENANTS[-1][0]


def user_of(cluster: str, job_id: str, tenant: str) -> str:
    return f"{tenant}-u{_hash(f'user:{cluster}:{job_id}') % USERS_PER_TENANT}"


def kept(cluster: str, job_id: str, fraction: float) -> bool:
    """Deterministic sample: a smaller cluster replays the same share of every window."""
    return fraction >= 1 or _hash(f"keep:{cluster}:{job_id}") % 10_000 < fraction * 10_000


def busiest_window(jobs: list[TraceJob], hours: float, cap_s: float) -> float:
    """Start (trace seconds, on an hour) of the `hours` window that submits the most
    GPU-seconds (durations capped at cap_s); ties: the earliest."""
    if not jobs:
        return 0.0
    width = hours * 3600
    last = jobs[-1].submit
    best, best_start = -1.0, 0.0
    start = math.floor(jobs[0].submit / 3600) * 3600
    demand = [(j.submit, j.gpus * min(j.duration, cap_s)) for j in jobs]
    lo = hi = 0
    total = 0.0
    while start <= last:
        while hi < len(demand) and demand[hi][0] < start + width:
            total += demand[hi][1]
            hi += 1
        while lo < hi and demand[lo][0] < start:
            total -= demand[lo][1]
            lo += 1
        if total > best:
            best, best_start = total, start
        start += 3600
    return best_start


def replay_plan(
    jobs: list[TraceJob],
    *,
    cluster: str,
    window_start: float,
    window_hours: float,
    compression: float,
    load: float,
    keep_fraction: float,
    node_gpus: int,
    nodes: int,
    cap_hours: float,
    prefix: str,
) -> tuple[list[ReplayJob], dict]:
    """The window's jobs, sampled, assigned, compressed: durations d/compression (capped at
    cap_hours of trace time), arrivals (t - window_start)/(compression x load)."""
    end = window_start + window_hours * 3600
    cap_s = cap_hours * 3600
    plan, too_big, offered = [], 0, 0.0
    for job in jobs:
        if not (window_start <= job.submit < end) or not kept(cluster, job.job_id, keep_fraction):
            continue
        per_node = min(job.gpus, node_gpus)
        n = math.ceil(job.gpus / node_gpus)
        if n > nodes:
            too_big += 1
            continue
        duration = round(min(job.duration, cap_s) / compression, 1)
        tenant = tenant_of(cluster, job.job_id)
        plan.append(
            ReplayJob(
                index=len(plan),
                job_id=job.job_id,
                tenant=tenant,
                user=user_of(cluster, job.job_id, tenant),
                arrival=round((job.submit - window_start) / (compression * load), 3),
                duration=duration,
                gpus=n * per_node,
                nodes=n,
                gpus_per_node=per_node,
                time_limit_min=math.ceil(duration / 60) + 1,
            )
        )
        offered += n * per_node * duration
    span = window_hours * 3600 / (compression * load)
    info = {
        "jobs": len(plan),
        "skipped_bigger_than_cluster": too_big,
        "replay_seconds": round(span, 1),
        "offered_load": round(offered / (nodes * node_gpus * span), 3) if span else 0,
        # the mean completion time if no job ever waited: no scheduler goes below it
        "jct_floor_s": round(statistics.fmean(j.duration for j in plan), 2) if plan else None,
        "by_tenant": {t: sum(1 for j in plan if j.tenant == t) for t, *_ in TENANTS},
    }
    return plan, info


# -- metrics -------------------------------------------------------------------------------


def allocation_bound(plan: list[ReplayJob], *, capacity: int) -> float:
    """The highest `gpu_allocation` any scheduler can reach on this plan: its GPU-seconds over
    capacity x the shortest possible makespan (the later of the last arrival-plus-duration and
    all the work packed perfectly from the start). A window's last long jobs set it."""
    if not plan:
        return 0.0
    work = sum(j.gpus * j.duration for j in plan)
    shortest = max(max(j.arrival + j.duration for j in plan), work / capacity)
    return round(work / (capacity * shortest), 3) if shortest else 0.0


def allocation_while_waiting(
    plan: list[ReplayJob], runs: dict, *, capacity: int, deadline: float
) -> tuple[float | None, float]:
    """GPUs held / capacity over the seconds when some submitted job had not started yet
    (the time a scheduler could have used idle GPUs), and how many seconds that was."""
    edges = []  # (time, d_waiting, d_gpus)
    for job in plan:
        submitted, start, end = runs.get(job.index, (None, None, None))
        if submitted is None:
            continue
        began = min(start, deadline) if start else deadline
        if began > submitted:
            edges += [(submitted, 1, 0), (began, -1, 0)]
        if start:
            stop = min(end, deadline) if end else deadline
            if stop > start:
                edges += [(start, 0, job.gpus), (stop, 0, -job.gpus)]
    edges.sort()
    waiting = gpus = 0
    held = span = 0.0
    last = edges[0][0] if edges else 0.0
    for t, dw, dg in edges:
        if waiting > 0:
            span += t - last
            held += gpus * (t - last)
        waiting, gpus, last = waiting + dw, gpus + dg, t
    return (round(held / (capacity * span), 3) if span > 0 else None), round(span, 1)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def phase_metrics(
    plan: list[ReplayJob],
    runs: dict,
    *,
    capacity: int,
    t0: float,
    deadline: float,
    scale: float,
    window_s: float | None = None,
) -> dict:
    """runs: {index: (submitted, start or None, end or None)}, real epoch seconds. `scale`
    turns real seconds into trace hours (compression / 3600); `window_s`, the replay's length,
    adds the allocation while jobs arrive (before the drain's long tail)."""
    jct, delay, slow = [], [], {}
    held, never, finished, last_end = 0.0, 0, 0, t0
    window_end = t0 + (window_s or 0)
    held_window = 0.0
    for job in plan:
        submitted, start, end = runs.get(job.index, (None, None, None))
        if submitted is None or not start:
            never += 1
            continue
        stop = min(end, deadline) if end else deadline
        held += job.gpus * max(0.0, stop - start)
        held_window += job.gpus * max(0.0, min(stop, window_end) - start)
        delay.append(max(0.0, start - submitted))
        if end:
            finished += 1
            last_end = max(last_end, end)
            took = max(end - submitted, 0.0)
            jct.append(took)
            slow.setdefault(job.tenant, []).append(took / max(job.duration, 1.0))
    makespan_end = last_end if never == 0 and finished == len(plan) else deadline
    makespan = max(makespan_end - t0, 1e-9)
    per_tenant = {t: round(statistics.fmean(v), 2) for t, v in sorted(slow.items())}
    worst_best = (
        round(max(per_tenant.values()) / min(per_tenant.values()), 2) if per_tenant else None
    )
    busy, busy_s = allocation_while_waiting(plan, runs, capacity=capacity, deadline=deadline)
    return {
        "jobs": len(plan),
        "finished": finished,
        "never_ran": never,
        "gpu_allocation": round(held / (capacity * makespan), 3),
        "gpu_allocation_replay_window": round(held_window / (capacity * window_s), 3)
        if window_s
        else None,
        "gpu_allocation_while_waiting": busy,
        "waiting_s": busy_s,
        "makespan_s": round(makespan, 1),
        "jct_mean_s": round(statistics.fmean(jct), 2) if jct else None,
        "jct_p95_s": _pct(jct, 0.95),
        "jct_mean_trace_h": round(statistics.fmean(jct) * scale, 2) if jct else None,
        "queue_delay_mean_s": round(statistics.fmean(delay), 2) if delay else None,
        "queue_delay_p95_s": _pct(delay, 0.95),
        "slowdown_mean_by_tenant": per_tenant,
        "slowdown_worst_to_best": worst_best,
    }


def allocation_series(
    plan: list[ReplayJob], runs: dict, *, capacity: int, t0: float, deadline: float, step=2.0
):
    """(seconds since t0, share of GPUs held) every `step` seconds, for the plot."""
    events = []
    for job in plan:
        _, start, end = runs.get(job.index, (None, None, None))
        if start:
            events.append((start - t0, min(end or deadline, deadline) - t0, job.gpus))
    points, t = [], 0.0
    while t <= deadline - t0:
        held = sum(g for a, b, g in events if a <= t < b)
        points.append((round(t, 2), held / capacity))
        t += step
    return points


# -- reference schedules (no services): what a plan allows, before anything is run ----------


def reference_schedule(
    plan: list[ReplayJob],
    *,
    nodes: int,
    node_gpus: int,
    order: str = "fifo",
    starving_s: float | None = None,
) -> dict:
    """reference_starts' schedule summed up: mean JCT, allocation by gpu_allocation's
    definition, p95 queueing, makespan. Says how far completion time and allocation can move
    at a load before any run."""
    if not plan:
        return {}
    start = reference_starts(
        plan, nodes=nodes, node_gpus=node_gpus, order=order, starving_s=starving_s
    )
    ends = [start[j.index] + j.duration for j in plan]
    work = sum(j.gpus * j.duration for j in plan)
    jct = [start[j.index] + j.duration - j.arrival for j in plan]
    return {
        "jct_mean_s": round(statistics.fmean(jct), 2),
        "gpu_allocation": round(work / (nodes * node_gpus * max(ends)), 3),
        "queue_delay_p95_s": _pct([start[j.index] - j.arrival for j in plan], 0.95),
        "makespan_s": round(max(ends), 1),
    }


def reference_starts(
    plan: list[ReplayJob],
    *,
    nodes: int,
    node_gpus: int,
    order: str = "fifo",
    starving_s: float | None = None,
) -> dict[int, float]:
    """{index: start, seconds after the replay's start} under an ideal scheduler with no
    latency: jobs placed on whole nodes as Slurm would (up to one node's GPUs on the fullest
    node that fits, more as whole free nodes).
    order "fifo": strictly in arrival order (the head blocks the rest: plain FIFO);
    "smallest": every waiting job that fits, least expected GPU-time (GPUs x time limit, what
    a scheduler is told) first, then arrival. With `starving_s` (the platform's starving rule,
    apps/jobs/priority.py): a job that has waited that long goes first, in arrival order, and
    one that does not fit holds every job behind it (it keeps its room)."""
    import heapq

    free = [node_gpus] * nodes
    arrivals = sorted(plan, key=lambda j: (j.arrival, j.index))
    queue, running, start = [], [], {}
    now, k = 0.0, 0

    def place(job) -> list | None:
        if job.nodes == 1:
            fits = [i for i, f in enumerate(free) if f >= job.gpus]
            return [(min(fits, key=lambda i: free[i]), job.gpus)] if fits else None
        whole = [i for i, f in enumerate(free) if f == node_gpus][: job.nodes]
        return [(i, node_gpus) for i in whole] if len(whole) == job.nodes else None

    def run(job) -> bool:
        where = place(job)
        if where is None:
            return False
        for i, g in where:
            free[i] -= g
        heapq.heappush(running, (now + job.duration, job.index, where))
        start[job.index] = now
        return True

    def size_order(job) -> tuple:
        return (job.gpus * job.time_limit_min, job.arrival, job.index)

    def becomes_starving() -> float:  # the next moment a waiting job crosses starving_s
        later = [j.arrival + starving_s - now for j in queue if j.arrival + starving_s > now]
        return now + min(later) if later else math.inf

    while k < len(arrivals) or queue or running:
        now = min(
            arrivals[k].arrival if k < len(arrivals) else math.inf,
            running[0][0] if running else math.inf,
            becomes_starving() if starving_s is not None else math.inf,
        )
        while running and running[0][0] <= now:
            for i, g in heapq.heappop(running)[2]:
                free[i] += g
        while k < len(arrivals) and arrivals[k].arrival <= now:
            queue.append(arrivals[k])
            k += 1
        if order == "fifo":
            while queue and run(queue[0]):
                queue.pop(0)
            continue
        starving = sorted(
            (j for j in queue if starving_s is not None and now - j.arrival >= starving_s),
            key=lambda j: (j.arrival, j.index),
        )
        first = {j.index for j in starving}
        waiting, held = [], False
        for job in starving + sorted((j for j in queue if j.index not in first), key=size_order):
            if held or not run(job):
                waiting.append(job)
                held = held or job.index in first  # a starving job keeps its room
        queue = waiting
    return start
