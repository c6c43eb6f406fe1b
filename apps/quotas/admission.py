"""Admission: which pending jobs of a tenant may start now, under its quotas.

Runs under a row lock on the tenant, so concurrent submissions are admitted one after the
other and can never together exceed a quota. Order: fair between projects (least GPU use in
the recent window first, round-robin), then priority and age within a project.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from apps.jobs.models import AttemptState, Job, JobAttempt
from apps.jobs.states import ACTIVE, State
from apps.quotas.models import Quota, UsageRecord
from apps.tenancy.models import Tenant

RESOURCES = [("gpus", "GPUs"), ("cpus", "CPUs"), ("memory_mb", "MiB of memory")]


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
    def scopes(job: Job) -> list[tuple]:
        return [
            ("tenant",),
            ("project", job.project_id),
            ("user", job.user_id),
            ("pu", job.project_id, job.user_id),
        ]

    def add(self, job: Job) -> None:
        for scope in self.scopes(job):
            self.by_scope[scope].add(job)

    def add_gpu_seconds(self, *, project_id, user_id, seconds: float) -> None:
        for scope in [
            ("tenant",),
            ("project", project_id),
            ("user", user_id),
            ("pu", project_id, user_id),
        ]:
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


def _books(tenant_id, now) -> Books:
    books = Books()
    for job in Job.objects.filter(tenant_id=tenant_id, state__in=list(ACTIVE)):
        books.add(job)
    ledger = (
        UsageRecord.objects.filter(tenant_id=tenant_id, ended_at__gte=month_start(now))
        .values("project_id", "user_id")
        .annotate(seconds=Sum("gpu_seconds"))
    )
    for row in ledger:
        books.add_gpu_seconds(
            project_id=row["project_id"], user_id=row["user_id"], seconds=row["seconds"] or 0
        )
    running = JobAttempt.objects.filter(
        job__tenant_id=tenant_id, state=AttemptState.RUNNING, started_at__isnull=False
    ).select_related("job")
    for attempt in running:
        since = max(attempt.started_at, month_start(now))
        books.add_gpu_seconds(
            project_id=attempt.job.project_id,
            user_id=attempt.job.user_id,
            seconds=max(0.0, (now - since).total_seconds()) * attempt.job.gpus,
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


def fair_order(jobs: list[Job], recent_usage: dict) -> list[Job]:
    """Round-robin between projects, least recent usage first; priority, then age, within."""
    queues: dict = defaultdict(list)
    for job in sorted(jobs, key=lambda j: (-j.priority, j.created_at)):
        queues[job.project_id].append(job)
    projects = sorted(queues, key=lambda p: (recent_usage.get(p, 0.0), queues[p][0].created_at))
    ordered = []
    while any(queues[p] for p in projects):
        for project in projects:
            if queues[project]:
                ordered.append(queues[project].pop(0))
    return ordered


def admit_tenant(*, tenant_id) -> list[Job]:
    """Admit what fits; give every job left waiting its reason and queue position."""
    from apps.jobs.services import attempt_open, job_transition
    from apps.jobs.tasks import dispatch_cluster

    now = timezone.now()
    with transaction.atomic():
        Tenant.objects.select_for_update().get(pk=tenant_id)
        pending = list(
            Job.objects.select_for_update()
            .filter(tenant_id=tenant_id, state=State.PENDING)
            .select_related("tenant")
        )
        if not pending:
            return []
        quotas = list(Quota.objects.filter(tenant_id=tenant_id).select_related("project", "user"))
        books = _books(tenant_id, now)
        window = now - timedelta(days=settings.TORUS_FAIRSHARE_DAYS)
        recent = dict(
            UsageRecord.objects.filter(tenant_id=tenant_id, ended_at__gte=window)
            .values_list("project_id")
            .annotate(s=Sum("gpu_seconds"))
            .values_list("project_id", "s")
        )
        admitted, position = [], 0
        for job in fair_order(pending, recent):
            reason = blocking_reason(job, quotas, books)
            if reason:
                position += 1
                if (job.state_reason, job.queue_position) != (reason, position):
                    job.state_reason, job.queue_position = reason, position
                    job.save(update_fields=["state_reason", "queue_position", "updated_at"])
                continue
            books.add(job)
            job.queue_position = None
            job.save(update_fields=["queue_position"])
            attempt = attempt_open(job=job)
            job_transition(job=job, to=State.QUEUED, reason="admitted", attempt=attempt)
            admitted.append(job)
        for cluster_id in {job.cluster_id for job in admitted}:
            transaction.on_commit(lambda c=cluster_id: dispatch_cluster.delay(str(c)))
    return admitted
