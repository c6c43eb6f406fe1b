"""Admission: which pending jobs of a tenant may start now, under its quotas.

Runs under a row lock on the tenant, so concurrent submissions are admitted one after the
other and can never together exceed a quota. Order: fair between projects (least GPU use in
the recent window first, round-robin), then within a project by apps/jobs/priority.py
(explicit priority, then least expected GPU-time first, aged so that nothing starves).

A cluster whose config says `"tenant_gpu_quota": "cluster"` (or the older `"slurm"`) enforces
the tenant-wide GPU quota itself (apps/jobs/cluster_limits.py) and admission does not hold jobs
for that one limit, so the cluster starts (and backfills) a tenant's jobs the moment its GPUs
free up instead of after a reconcile-admit-dispatch round trip (bench/scheduling.py measured
the difference; docs/jobs.md "Scheduling"). A cluster with `"quota_borrowing": true` lets a job
held only by the tenant GPU quota borrow the cluster's idle GPUs (apps/jobs/borrowing.py; where
the cluster holds the quota, it lends them through the limits: apps/jobs/cluster_limits.py).
"""

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from apps.core.bulk import bulk_update
from apps.jobs import borrowing
from apps.jobs.attempts import attempts_build, attempts_open
from apps.jobs.cluster_limits import enforced_by_cluster
from apps.jobs.models import AttemptState, Job, JobAttempt, JobEvent
from apps.jobs.priority import in_order, starving
from apps.jobs.states import ACTIVE, State
from apps.jobs.telemetry import decided
from apps.jobs.transitions import TRANSITION_FIELDS, events_record, transition_in_memory
from apps.jobs.wake import request_dispatch
from apps.quotas.models import Quota
from apps.quotas.selectors import gpu_seconds_by_project, gpu_seconds_by_project_user, limits_of
from apps.tenancy.models import Tenant

RESOURCES = [("gpus", "GPUs"), ("cpus", "CPUs"), ("memory_mb", "MiB of memory")]
logger = logging.getLogger(__name__)


@dataclass
class Usage:
    gpus: int = 0
    cpus: int = 0
    memory_mb: int = 0
    running_jobs: int = 0
    gpu_seconds_month: float = 0.0

    def add(self, job: Job) -> None:
        self.gpus += job.gpus
        self.cpus += job.cpus
        self.memory_mb += job.memory_mb
        self.running_jobs += 1


@dataclass
class Books:
    """Current use per scope: ('tenant',), ('project', id), ('user', id), ('pu', p, u)."""

    by_scope: dict = field(default_factory=lambda: defaultdict(Usage))

    @staticmethod
    def scopes_of(project_id, user_id) -> list[tuple]:
        return [
            ("tenant",),
            ("project", project_id),
            ("user", user_id),
            ("pu", project_id, user_id),
        ]

    @staticmethod
    def scopes(job: Job) -> list[tuple]:
        return Books.scopes_of(job.project_id, job.user_id)

    def add(self, job: Job) -> None:
        for scope in self.scopes(job):
            self.by_scope[scope].add(job)

    def add_gpu_seconds(self, *, project_id, user_id, seconds: float) -> None:
        for scope in self.scopes_of(project_id, user_id):
            self.by_scope[scope].gpu_seconds_month += seconds


def quota_scope(quota: Quota) -> tuple:
    if quota.project_id and quota.user_id:
        return ("pu", quota.project_id, quota.user_id)
    if quota.project_id:
        return ("project", quota.project_id)
    if quota.user_id:
        return ("user", quota.user_id)
    return ("tenant",)


def month_start(now):
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _books(tenant_id, now, quotas: list[Quota]) -> Books:
    """What the tenant's admitted jobs hold, summed in SQL; GPU-hours only if a quota asks."""
    books = Books()
    active = (
        Job.objects.filter(tenant_id=tenant_id, state__in=list(ACTIVE))
        .values("project_id", "user_id")
        .annotate(gpus=Sum("gpus"), cpus=Sum("cpus"), memory_mb=Sum("memory_mb"), jobs=Count("id"))
    )
    for row in active:
        for scope in Books.scopes_of(row["project_id"], row["user_id"]):
            used = books.by_scope[scope]
            used.gpus += row["gpus"]
            used.cpus += row["cpus"]
            used.memory_mb += row["memory_mb"]
            used.running_jobs += row["jobs"]
    if not any(q.gpu_hours_per_month is not None for q in quotas):
        return books
    ledger = gpu_seconds_by_project_user(tenant_id=tenant_id, since=month_start(now))
    for (project_id, user_id), seconds in ledger.items():
        books.add_gpu_seconds(project_id=project_id, user_id=user_id, seconds=seconds)
    running = JobAttempt.objects.filter(
        job__tenant_id=tenant_id, state=AttemptState.RUNNING, started_at__isnull=False
    ).values("started_at", "job__project_id", "job__user_id", "job__gpus")
    for row in running:
        since = max(row["started_at"], month_start(now))
        books.add_gpu_seconds(
            project_id=row["job__project_id"],
            user_id=row["job__user_id"],
            seconds=max(0.0, (now - since).total_seconds()) * row["job__gpus"],
        )
    return books


def blocking_reason(job: Job, quotas: list[Quota], books: Books) -> str:
    """Why `job` cannot be admitted now, in words a person can read; '' when it fits."""
    for quota in quotas:
        scope = quota_scope(quota)
        if scope not in Books.scopes(job):
            continue
        used = books.by_scope[scope]
        for name, words in RESOURCES:
            limit = getattr(quota, name)
            if name == "gpus" and scope == ("tenant",) and enforced_by_cluster(job.cluster):
                continue  # the cluster holds this one (backend.tenant_gpu_limit)
            if limit is not None and getattr(used, name) + getattr(job, name) > limit:
                return (
                    f"{quota.scope_label}: {getattr(used, name)} of {limit} {words} in use"
                    f" (this job needs {getattr(job, name)})"
                )
        if quota.running_jobs is not None and used.running_jobs + 1 > quota.running_jobs:
            return f"{quota.scope_label}: {used.running_jobs} of {quota.running_jobs} jobs running"
        if quota.gpu_hours_per_month is not None and job.gpus:
            hours = used.gpu_seconds_month / 3600
            if hours >= quota.gpu_hours_per_month:
                return (
                    f"{quota.scope_label}: {hours:.1f} of {quota.gpu_hours_per_month:g}"
                    " GPU-hours used this month"
                )
    return ""


def fair_order(jobs: list[Job], recent_usage: dict, *, now=None) -> list[Job]:
    """Round-robin between projects, least recent usage first; priority.order_key within."""
    now = now or timezone.now()
    queues: dict = defaultdict(list)
    for job in in_order(jobs, now=now):
        queues[job.project_id].append(job)
    projects = sorted(queues, key=lambda p: (recent_usage.get(p, 0.0), queues[p][0].created_at))
    ordered = []
    while any(queues[p] for p in projects):
        for project in projects:
            if queues[project]:
                ordered.append(queues[project].pop(0))
    return ordered


def admit_tenant(*, tenant_id) -> list[Job]:
    """Admit what fits; give every job left waiting its reason and queue position.

    Without quotas nothing can block, so the pending jobs are simply claimed (skipping rows
    another admitter holds). With quotas the tenant row is locked so that two admitters never
    count the same free capacity twice.
    """
    now = timezone.now()
    quotas = limits_of(tenant_id=tenant_id)
    with transaction.atomic():
        if quotas:
            Tenant.objects.select_for_update().get(pk=tenant_id)
        pending = list(
            Job.objects.select_for_update(skip_locked=not quotas, of=("self",))
            .filter(tenant_id=tenant_id, state=State.PENDING)
            .select_related("tenant", "project__tenant", "cluster")  # attempt paths: no N+1
        )
        if not pending:
            return []
        admitted, waiting, borrowed = [], [], 0
        if quotas:
            books = _books(tenant_id, now, quotas)
            recent = {}
            if len({job.project_id for job in pending}) > 1:
                window = now - timedelta(days=settings.TORUS_FAIRSHARE_DAYS)
                recent = gpu_seconds_by_project(tenant_id=tenant_id, since=window)
            room, lifted = borrowing.Room(), borrowing.without_tenant_gpus(quotas)
            for job in fair_order(pending, recent, now=now):
                reason = blocking_reason(job, quotas, books)
                if reason and room.fits(job) and not blocking_reason(job, lifted, books):
                    reason = ""  # borrows idle GPUs past the tenant's GPU quota
                    borrowed += 1
                if reason:
                    waiting.append((job, reason))
                    if starving(job, now=now) and not blocking_reason(job, quotas, Books()):
                        books.add(job)  # holds its room: the jobs after it may not pass it
                        room.close()
                else:
                    books.add(job)
                    room.take(job)
                    admitted.append(job)
        else:
            admitted = in_order(pending, now=now)
        changed = []
        for position, (job, reason) in enumerate(waiting, start=1):
            if job.state_reason != reason:
                decided(tenant=job.tenant.slug, decision="held")
            if (job.state_reason, job.queue_position) != (reason, position):
                job.state_reason, job.queue_position = reason, position
                changed.append(job)
        if changed:
            bulk_update(changed, ["state_reason", "queue_position", "updated_at"])
        if admitted:
            slug = admitted[0].tenant.slug
            decided(tenant=slug, decision="admitted", count=len(admitted) - borrowed)
            if borrowed:
                decided(tenant=slug, decision="borrowed", count=borrowed)
            attempts = attempts_open(jobs=admitted)
            events = []
            for job, attempt in zip(admitted, attempts, strict=True):
                job.queue_position = None
                events.append(
                    transition_in_memory(
                        job=job, to=State.QUEUED, reason="admitted", attempt=attempt
                    )
                )
            events_record(events=events)
            bulk_update(admitted, TRANSITION_FIELDS)
            for cluster_id in {job.cluster_id for job in admitted}:
                transaction.on_commit(lambda c=cluster_id: request_dispatch(c))
    return admitted


def admit_submitted(*, jobs: list[Job]) -> tuple[list[JobAttempt], list[JobEvent]]:
    """What admit_tenant would do at once with new jobs of a tenant without quotas, done
    before they are written (nothing can hold them): each is QUEUED (in memory) with its
    first attempt and the event; the caller writes them with the jobs, then asks the
    clusters to dispatch. Other PENDING jobs of the tenant are left to their own admission
    (a restart's, the control pass's)."""
    attempts, _ = attempts_build(jobs=jobs, previous={})  # first attempts: no checkpoint yet
    for slug in {job.tenant.slug for job in jobs}:
        decided(tenant=slug, decision="admitted", count=sum(j.tenant.slug == slug for j in jobs))
    events = [
        transition_in_memory(job=job, to=State.QUEUED, reason="admitted", attempt=attempt)
        for job, attempt in zip(jobs, attempts, strict=True)
    ]
    return attempts, events
