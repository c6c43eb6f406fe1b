"""Borrowing idle GPUs past the tenant's GPU quota, as Kueue's cohorts do (without preemption).

Opt-in per cluster: `Cluster.config["quota_borrowing"] = true`, where admission holds the
tenant GPU quota (not where the cluster holds it, `tenant_gpu_quota`). A job held back only by
its tenant's GPU quota is admitted anyway when its cluster has idle GPUs for it: the GPUs of the
cluster's nodes less those of every admitted or running job placed there, of all tenants. So a
busy tenant uses what the others leave idle, and nothing waiting in the cluster is passed.

Borrowed GPUs are not taken back: a tenant whose job comes back under its quota to a full
cluster waits for running jobs to end (a borrowed one ends within its time limit). A tenant with
a starving job (apps/jobs/priority.py) borrows nothing more, so the reserved room is not eaten.
Two tenants admitted at the same moment may both borrow the same idle GPUs; the later job then
waits in the cluster's queue, as any admitted job does.
"""

import copy
from collections import defaultdict

from django.db.models import Sum

from apps.compute.models import Node
from apps.jobs.models import Job
from apps.jobs.states import ACTIVE


def enabled(cluster) -> bool:
    return cluster is not None and bool((cluster.config or {}).get("quota_borrowing"))


def cluster_gpus(*, cluster_id) -> int:
    return sum(
        sum(int(n) for kinds in node.accelerators.values() for n in kinds.values())
        for node in Node.objects.filter(cluster_id=cluster_id).only("accelerators")
    )


def gpus_admitted(*, cluster_id) -> int:
    total = Job.objects.filter(cluster_id=cluster_id, state__in=list(ACTIVE)).aggregate(
        gpus=Sum("gpus")
    )["gpus"]
    return int(total or 0)


class Room:
    """Idle GPUs per cluster during one admission pass: read once per cluster when first
    asked, less what this pass has admitted (its rows are written after the pass)."""

    def __init__(self):
        self.idle: dict = {}
        self.taken: dict = defaultdict(int)
        self.closed = False

    def fits(self, job: Job) -> bool:
        if self.closed or not enabled(job.cluster):
            return False
        if job.cluster_id not in self.idle:
            self.idle[job.cluster_id] = cluster_gpus(cluster_id=job.cluster_id) - gpus_admitted(
                cluster_id=job.cluster_id
            )
        return self.idle[job.cluster_id] - self.taken[job.cluster_id] >= job.gpus

    def take(self, job: Job) -> None:
        """A job admitted in this pass (borrowing or not) holds its GPUs from now on."""
        self.taken[job.cluster_id] += job.gpus

    def close(self) -> None:
        """No more borrowing in this pass (a starving job waits for the tenant's quota)."""
        self.closed = True


def without_tenant_gpus(quotas: list) -> list:
    """The quotas with the tenant-wide GPU limit lifted: what else would block a job."""
    lifted = []
    for quota in quotas:
        if not (quota.project_id or quota.user_id) and quota.gpus is not None:
            quota = copy.copy(quota)
            quota.gpus = None
        lifted.append(quota)
    return lifted
