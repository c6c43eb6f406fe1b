"""The order in which admission looks at a tenant's waiting jobs: size- and age-aware.

Within one explicit priority, least expected GPU-time first (GPUs x time limit, the user's
own estimate), as shortest-job-first schedulers (Tiresias, SRTF) do: on a busy cluster it
cuts the mean completion time, because a short job no longer waits behind a long one. Aging
keeps it from starving long jobs: the rank is log2(expected GPU-seconds) minus the seconds
waited over AGING_SECONDS, so each AGING_SECONDS of waiting counts as halving the job's size,
and a job waits at most AGING_SECONDS x log2(its size / the smallest job's) before it is ahead
of every newcomer. A job that has waited STARVING_SECONDS goes before every job of its
priority that has not, and holds its room in the quota (admission counts it as if admitted),
so smaller jobs stop passing it and it starts as soon as enough of the quota frees up. The
settings TORUS_SCHEDULING_AGING_SECONDS and _STARVING_SECONDS override the defaults.

The same size order is passed to the cluster's own queue (cluster_nice, as Submission.nice:
the backend translates it, e.g. into Slurm's nice; a backend without one ignores it): what
admission lets through waits in that queue, which otherwise runs it in submission order; a
nice of NICE_PER_DOUBLING per doubling of the expected GPU-time puts the small jobs first there
too, and the cluster's backfill still fills around them. Cluster.config["size_nice"] (a
number, 0 = off) or the setting TORUS_SCHEDULING_NICE_PER_DOUBLING overrides the default. The
starving rule reaches that queue too: the reconciler clears the nice of a starving job still
waiting there (unstarve, through Backend.clear_nice), which puts it back at its submission
rank.
"""

import math
from datetime import datetime

from django.conf import settings

AGING_SECONDS = 600.0
STARVING_SECONDS = 3600.0
# Nice per doubling of the expected GPU-time (Slurm's units). Under priority/basic one unit is one
# submission: a job is passed by at most 1,000 later jobs for each doubling of its size over
# theirs, i.e. the order is strict on a busy queue (100 let a big job pass the small ones
# after 100-600 submissions and cost 0.07 of the allocation: docs/scheduling.md). Under
# priority/multifactor it is one priority point (fair share weighs 10^5 here).
NICE_PER_DOUBLING = 1000
NICE_MAX = 10_000  # a queue's nice is bounded; a 2^100 GPU-second job is not expected


def aging_seconds() -> float:
    return float(getattr(settings, "TORUS_SCHEDULING_AGING_SECONDS", AGING_SECONDS))


def starving_seconds() -> float:
    return float(getattr(settings, "TORUS_SCHEDULING_STARVING_SECONDS", STARVING_SECONDS))


def expected_gpu_seconds(job) -> float:
    """GPUs x the time limit; a job without GPUs counts as one GPU (it still holds a slot)."""
    minutes = ((job.spec or {}).get("resources") or {}).get("time_limit") or 60
    return max(job.gpus, 1) * float(minutes) * 60


def waited_seconds(job, *, now: datetime) -> float:
    return max(0.0, (now - job.created_at).total_seconds())


def rank(job, *, now: datetime) -> float:
    """Smaller first: log2 of the expected GPU-seconds, less one per AGING_SECONDS waited."""
    return _rank(job, now, aging_seconds())


def _rank(job, now: datetime, aging: float) -> float:
    return math.log2(expected_gpu_seconds(job)) - waited_seconds(job, now=now) / aging


def order_key(job, *, now: datetime) -> tuple:
    """Explicit priority first (higher first), starving jobs, rank, then age (older first)."""
    return _key(job, now, aging_seconds(), starving_seconds())


def in_order(jobs, *, now: datetime) -> list:
    """`jobs` sorted by order_key (the settings read once, not per job: 10,000 jobs a pass
    in apps/jobs/estimates.py)."""
    aging, starving_after = aging_seconds(), starving_seconds()
    return sorted(jobs, key=lambda job: _key(job, now, aging, starving_after))


def _key(job, now: datetime, aging: float, starving_after: float) -> tuple:
    starves = waited_seconds(job, now=now) >= starving_after
    return (-job.priority, not starves, _rank(job, now, aging), job.created_at)


def starving(job, *, now: datetime) -> bool:
    return waited_seconds(job, now=now) >= starving_seconds()


def nice_per_doubling(cluster) -> float:
    configured = (getattr(cluster, "config", None) or {}).get("size_nice")
    if configured is None:
        configured = getattr(settings, "TORUS_SCHEDULING_NICE_PER_DOUBLING", NICE_PER_DOUBLING)
    return max(0.0, float(configured))


def cluster_nice(*, job, cluster) -> int:
    """The job's place in the size order as a nice value for the cluster's queue (0 for a
    one-GPU-minute job, more for bigger ones; never negative: users may not raise priority)."""
    step = nice_per_doubling(cluster)
    if not step:
        return 0
    doublings = math.log2(max(expected_gpu_seconds(job) / 60.0, 1.0))
    return min(NICE_MAX, round(step * doublings))
