"""A model of one cluster's queue, played forward to say when each waiting job starts.

Plain data in, start times out (no database): apps/jobs/estimates.py feeds it the running
jobs with their predicted ends and the waiting jobs in the order admission and the cluster's
queue will take them (apps/jobs/priority.py), and reads back a start time for each.

What it models: each partition as a pool of GPUs and CPUs (its healthy nodes' sum), each
tenant's GPU quota across the cluster, and EASY backfill (Slurm's sched/backfill keeps the
same kind of reservation): the first job that does not fit is given the earliest time enough
frees up, and a later job starts before it only if it fits now and either ends by then or
uses what the reservation leaves over. A job held by its tenant's quota lets the others pass,
as admission does; on a cluster that lends idle GPUs past quotas (`lending`), it borrows what
the others' waiting jobs do not claim at that moment. Not modelled: which nodes (a job needing
whole nodes may wait for fragmented GPUs to line up), and jobs that will be submitted later;
the range that estimates.py puts around each start is calibrated on how far such effects made
past predictions miss.
"""

import bisect
from collections import deque
from dataclasses import dataclass, field

# How many waiting jobs past the first blocked one are tried at each event (Slurm's
# bf_max_job_test is per pass; this is per simulated event, so smaller).
BACKFILL_DEPTH = 8
# Ends close together are one event: within STEP_FRACTION of how far ahead they are, at least
# MIN_STEP_SECONDS and at most MAX_STEP_SECONDS (a start ten seconds away is said to the second,
# one an hour away to the minute; a larger step would let short jobs run once per step).
MIN_STEP_SECONDS = 1.0
MAX_STEP_SECONDS = 60.0
STEP_FRACTION = 0.05


@dataclass(slots=True)
class Waiting:
    key: object
    pool: str
    tenant: object
    gpus: int
    cpus: int
    seconds: float  # predicted run time
    rank: int = 0  # its place in the order (simulate sets it)


@dataclass(slots=True)
class Running:
    pool: str
    tenant: object
    gpus: int
    cpus: int
    ends: float  # predicted end, in the same clock as `now`


@dataclass
class Pool:
    gpus: int
    cpus: int


@dataclass
class _State:
    free: dict  # pool -> [gpus, cpus]
    tenant_used: dict  # tenant -> GPUs held
    tenant_limit: dict  # tenant -> GPU quota (absent: none)
    ends: dict = field(default_factory=dict)  # pool -> sorted [(end, seq, tenant, gpus, cpus)]
    seq: int = 0
    # pool -> (the job holding the reservation, [shadow time, spare GPUs, spare CPUs])
    reserved: dict = field(default_factory=dict)

    def fits_pool(self, job: Waiting) -> bool:
        free = self.free[job.pool]
        return free[0] >= job.gpus and free[1] >= job.cpus

    def quota_allows(self, job: Waiting) -> bool:
        limit = self.tenant_limit.get(job.tenant)
        return limit is None or self.tenant_used.get(job.tenant, 0) + job.gpus <= limit

    def take(self, *, pool, tenant, gpus, cpus, ends: float) -> None:
        free = self.free[pool]
        free[0] -= gpus
        free[1] -= cpus
        self.tenant_used[tenant] = self.tenant_used.get(tenant, 0) + gpus
        self.seq += 1
        bisect.insort(self.ends.setdefault(pool, []), (ends, self.seq, tenant, gpus, cpus))

    def next_end(self) -> float | None:
        return min((ends[0][0] for ends in self.ends.values() if ends), default=None)

    def release_until(self, when: float) -> set:
        """Free what ends by `when`; returns the tenants that got GPUs back."""
        tenants = set()
        for pool, ends in self.ends.items():
            done = bisect.bisect_right(ends, (when, float("inf")))
            if not done:
                continue
            free = self.free[pool]
            for _, _, tenant, gpus, cpus in ends[:done]:
                free[0] += gpus
                free[1] += cpus
                self.tenant_used[tenant] -= gpus
                tenants.add(tenant)
            del ends[:done]
        return tenants

    def reservation(self, job: Waiting) -> list:
        """[when `job` would fit in its pool as running jobs end, the GPUs and CPUs spare
        then]: kept while the same job holds it (a backfilled job ends before it or takes
        from the spare, so neither moves it)."""
        held = self.reserved.get(job.pool)
        if held is not None and held[0] is job:
            return held[1]
        gpus, cpus = self.free[job.pool]
        when = float("inf")
        for end, _, _, g, c in self.ends.get(job.pool, ()):
            gpus, cpus = gpus + g, cpus + c
            if gpus >= job.gpus and cpus >= job.cpus:
                when = end
                break
        spare = [when, gpus - job.gpus, cpus - job.cpus]
        self.reserved[job.pool] = (job, spare)
        return spare


def never_fits(job: Waiting, pools: dict[str, Pool]) -> bool:
    pool = pools.get(job.pool)
    return pool is None or job.gpus > pool.gpus or job.cpus > pool.cpus


def simulate(
    *,
    now: float,
    pools: dict[str, Pool],
    running: list[Running],
    waiting: list[Waiting],
    tenant_limits: dict | None = None,
    tenant_held_elsewhere: dict | None = None,
    lending: bool = False,
) -> dict:
    """{job key: predicted start} for every waiting job that can ever start here (the others,
    too big for their pool or their tenant's quota, are absent). `lending`: a job over its
    tenant's quota may borrow idle GPUs (apps/jobs/borrowing.py, cluster_limits.py)."""
    limits = tenant_limits or {}
    state = _State(
        free={name: [pool.gpus, pool.cpus] for name, pool in pools.items()},
        tenant_used=dict(tenant_held_elsewhere or {}),
        tenant_limit=limits,
    )
    for job in running:
        if job.pool in state.free:
            state.take(
                pool=job.pool, tenant=job.tenant, gpus=job.gpus, cpus=job.cpus, ends=job.ends
            )
        else:  # a pool gone from the inventory: its jobs still hold the tenant's quota
            state.tenant_used[job.tenant] = state.tenant_used.get(job.tenant, 0) + job.gpus
    queues: dict = {}  # pool -> its waiting jobs, the first last (taken from the end)
    startable = 0
    for rank, job in enumerate(waiting):
        job.rank = rank
        if not never_fits(job, pools) and job.gpus <= limits.get(job.tenant, job.gpus):
            queues.setdefault(job.pool, []).append(job)
            startable += 1
    for queue in queues.values():
        queue.reverse()
    starts: dict = {}
    held: dict = {}  # tenant -> the jobs its quota holds, in order
    asleep: dict = {}  # pool -> [GPUs, CPUs]: with fewer free, none of its window can start
    clock, released = now, set()
    while len(starts) < startable:
        if held and released:
            _unhold(state, held, released, queues, asleep)
        for pool, queue in queues.items():
            free = state.free[pool]
            least = asleep.get(pool)
            if queue and not (least and (free[0] < least[0] or free[1] < least[1])):
                wake = _start_what_fits(state, queue, held, clock, starts, lending)
                asleep.pop(pool, None) if wake is None else asleep.__setitem__(pool, wake)
        ends = state.next_end()
        if ends is None:  # nothing will free up: what is left fits under no quota
            break
        # ends close together are one event: fewer events to play
        step = min(max(MIN_STEP_SECONDS, STEP_FRACTION * (clock - now)), MAX_STEP_SECONDS)
        clock = max(ends, clock + step)
        released = state.release_until(clock)
    return starts


def _unhold(state: _State, held: dict, tenants: set, queues: dict, asleep: dict) -> None:
    """The quota-held jobs of `tenants` (they got GPUs back) go back to their place in their
    pool's queue (admission lets them into the cluster's queue), as many as the room holds."""
    for tenant in tenants:
        jobs = held.get(tenant)
        if not jobs:
            continue
        limit = state.tenant_limit.get(tenant)
        room = float("inf") if limit is None else limit - state.tenant_used.get(tenant, 0)
        while jobs and jobs[0].gpus <= room:
            job = jobs.popleft()
            room -= job.gpus
            bisect.insort(queues[job.pool], job, key=lambda queued: -queued.rank)
            asleep.pop(job.pool, None)


def _start_what_fits(
    state: _State, queue: list, held: dict, clock, starts, lending: bool = False
) -> tuple:
    """At `clock`, in one pool: start, in order, the waiting jobs that fit; the first that does
    not fit holds a reservation, and the next BACKFILL_DEPTH jobs may backfill around it. A
    job over its tenant's quota moves to the tenant's held queue (admission lets the others
    pass), or where the cluster lends, borrows once the others have started (_lend). The
    queue (its first job last) loses what started or moved; when nothing did, returns the
    least [GPUs, CPUs] free that could change that (until then the pool need not be looked
    at)."""
    free, used, limits = state.free[queue[-1].pool], state.tenant_used, state.tenant_limit
    spare = None  # the reservation at this event
    kept = []  # what stays of the first `stop`, in order
    need = None  # the least GPUs and CPUs of a request that did not fit
    borrowers = []  # over their tenant's quota where the cluster lends
    stop = len(queue)
    for index in range(len(queue)):
        if index >= stop:
            break
        job = queue[-1 - index]
        limit = limits.get(job.tenant)
        if limit is not None and used.get(job.tenant, 0) + job.gpus > limit:
            if lending:
                borrowers.append(job)
                kept.append(job)
            else:
                held.setdefault(job.tenant, deque()).append(job)
            continue
        fits = job.gpus <= free[0] and job.cpus <= free[1]
        if spare is None:
            if fits:
                state.reserved.pop(job.pool, None)  # what it takes moves the reservation
                _start(state, job, clock, starts)
            else:
                spare = state.reservation(job)
                need = [job.gpus, job.cpus]
                stop = min(stop, index + 1 + BACKFILL_DEPTH)
                kept.append(job)
            continue
        if not fits:
            need[0] = job.gpus if job.gpus < need[0] else need[0]
            need[1] = job.cpus if job.cpus < need[1] else need[1]
        elif clock + job.seconds <= spare[0]:
            _start(state, job, clock, starts)
            continue
        elif job.gpus <= spare[1] and job.cpus <= spare[2]:
            spare[1], spare[2] = spare[1] - job.gpus, spare[2] - job.cpus
            _start(state, job, clock, starts)
            continue
        kept.append(job)  # (a job refused by the reservation is refused while it holds)
    if borrowers:
        kept, need = _lend(state, free, kept, borrowers, need, clock, starts)
    if len(kept) == stop:
        return need
    queue[len(queue) - stop :] = kept[::-1]
    return None


def _lend(state: _State, free: list, kept: list, borrowers: list, need, clock, starts) -> tuple:
    """Start the borrowers that fit in what the pool's other waiting jobs do not claim (the
    cluster never lends a tenant's own room away); returns what stays and the least request
    that did not fit."""
    borrowing = {id(job) for job in borrowers}
    claimed = sum(job.gpus for job in kept if id(job) not in borrowing)
    started = set()
    for job in borrowers:
        if job.gpus <= free[0] - claimed and job.cpus <= free[1]:
            _start(state, job, clock, starts)
            started.add(id(job))
        elif need is None:
            need = [job.gpus, job.cpus]
        else:
            need = [min(need[0], job.gpus), min(need[1], job.cpus)]
    return [job for job in kept if id(job) not in started], need


def _start(state: _State, job: Waiting, clock: float, starts: dict) -> None:
    starts[job.key] = clock
    state.take(
        pool=job.pool, tenant=job.tenant, gpus=job.gpus, cpus=job.cpus, ends=clock + job.seconds
    )
