"""Writes for jobs: submit, cancel, restart (a job's state changes in apps/jobs/transitions.py).

Submit, cancel and restart authorise at their boundary with the policy module's `authorize()`
(the same call the API layer makes), so a caller outside the API (a task, a command, the
admin) cannot act beyond the actor's rights either."""

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from apps.compute.models import Cluster
from apps.compute.placement import candidate_clusters, placements_fitting
from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.core.statements import insert_together
from apps.jobs import admission, paths, submit_cache
from apps.jobs.estimate_store import soonest
from apps.jobs.inference import model_resolve
from apps.jobs.models import ATTEMPT_ENDED, AttemptState, Job, JobAttempt, JobEvent
from apps.jobs.spec import image_check, normalise, paths_check, secrets_check, totals
from apps.jobs.staging import datasets_resolve
from apps.jobs.states import TERMINAL, State
from apps.jobs.transitions import events_announce, job_transition
from apps.jobs.wake import request_cancel, request_dispatch
from apps.quotas.models import Quota
from apps.tenancy.audit import audit_event, audit_record
from apps.tenancy.models import AuditEvent, Project
from apps.tenancy.policies import authorize

logger = logging.getLogger(__name__)


def job_submit(*, actor: Actor, project: Project, spec: dict) -> Job:
    """Create a job from a validated spec, admit it if it fits, and dispatch after commit."""
    return job_submit_many(actor=actor, items=[(project, spec)])[0]


def job_submit_many(*, actor: Actor, items: list[tuple[Project, dict]]) -> list[Job]:
    """Create many jobs at once (all or none), then admit them (see jobs_create)."""
    return [submitted.job for submitted in jobs_create(actor=actor, items=items)]


@dataclass
class Submitted:
    """A job just submitted. `current`: its attempts and events are all it has as committed
    (it was admitted as it was written); else admission ran apart and the job was read again,
    with its attempts and events."""

    job: Job
    attempts: list[JobAttempt]
    events: list[JobEvent]
    current: bool


def jobs_create(*, actor: Actor, items: list[tuple[Project, dict]]) -> list[Submitted]:
    """Create many jobs at once (all or none) and admit them.

    A tenant without quotas has nothing that could hold a job: its jobs are written already
    admitted, with their first attempts, events and audit rows, in one statement
    (admission.admit_submitted; apps/core/statements.py), and its clusters are asked to
    dispatch once that is committed. A tenant with quotas has its jobs written PENDING
    first; admission then runs in its own short transaction (one pass per tenant), so the
    tenant's admission lock is never held while rows are written. Placements and whether a
    tenant has quotas come from the web process's cache while nothing they depend on has
    changed (apps/jobs/submit_cache.py).
    """
    for project in {project.pk: project for project, _ in items}.values():
        authorize(
            actor, resource="job", action="create", tenant_id=project.tenant_id, target=project
        )
    tenant_ids = list(dict.fromkeys(project.tenant_id for project, _ in items))
    gens = submit_cache.generations(tenant_ids=tenant_ids)
    placements: dict[tuple, tuple] = {}
    jobs = []
    for project, raw in items:
        spec = normalise(raw)
        paths_check(spec=spec, tenant=project.tenant)
        secrets_check(spec=spec, project=project)
        spec["datasets"] = datasets_resolve(
            actor=actor, project=project, refs=spec.get("datasets") or []
        )
        if spec.get("model"):  # pinned to the version the name or alias means now
            spec["model"] = str(model_resolve(actor=actor, project=project, ref=spec["model"]).pk)
        cluster, partition, why = _placement(spec=spec, project=project, gens=gens, seen=placements)
        image_check(spec=spec, tenant=project.tenant, cluster=cluster)
        job = Job(
            tenant=project.tenant,
            project=project,
            user=actor.user,
            name=spec["name"],
            kind=spec["kind"],
            spec=spec,
            labels=spec["labels"],
            priority=spec["priority"],
            cluster=cluster,
            partition=partition,
            placement_reason=why,
            **totals(spec),
        )
        job.checkpoint_dir = str(paths.checkpoint_dir(job))
        jobs.append(job)
    limited = {
        tenant_id
        for tenant_id in tenant_ids
        if submit_cache.has_quotas(
            gens, tenant_id, lambda t=tenant_id: Quota.objects.filter(tenant_id=t).exists()
        )
    }
    at_once = [job for job in jobs if job.tenant_id not in limited]
    events = {  # the tenant's live jobs lists show a new job at once
        job.pk: [JobEvent(job=job, to_state=State.PENDING, reason="submitted")] for job in jobs
    }
    attempts, admitted = admission.admit_submitted(jobs=at_once) if at_once else ([], [])
    for event in admitted:
        events[event.job_id].append(event)
    written = [event for job in jobs for event in events[job.pk]]
    audits = [
        audit_event(
            actor=actor,
            tenant_id=job.tenant_id,
            action="job.create",
            target=job,
            changes={"name": [None, job.name], "project": [None, job.project.slug]},
        )
        for job in jobs
    ]
    insert_together(  # one statement: every row or none
        (Job, jobs), (JobAttempt, attempts), (JobEvent, written), (AuditEvent, audits)
    )
    events_announce(events=written)
    for cluster_id in {job.cluster_id for job in at_once}:
        transaction.on_commit(lambda c=cluster_id: request_dispatch(c))
    for tenant_id in limited:
        admission.admit_tenant(tenant_id=tenant_id)
    by_id = (  # none without quotas (in_bulk([]) reads nothing)
        Job.objects.select_related("project", "user", "cluster")
        .prefetch_related("attempts", "events__attempt")
        .in_bulk([job.pk for job in jobs if job.tenant_id in limited])
    )
    first = {attempt.job_id: attempt for attempt in attempts}
    return [
        Submitted(job, [first[job.pk]], events[job.pk], current=True)
        if job.tenant_id not in limited
        else Submitted(
            by_id[job.pk],
            list(by_id[job.pk].attempts.all()),
            list(by_id[job.pk].events.all()),
            current=False,
        )
        for job in jobs
    ]


def _placement(*, spec: dict, project: Project, gens, seen: dict) -> tuple[Cluster, str, str]:
    """(cluster, partition, why there) for a spec. Where it can go is found once per shape in
    a request (and kept in the process's cache across requests); among several clusters, the
    one where it is expected to start soonest (estimate_store.soonest), read once per request."""
    named = spec.get("cluster")
    default = project.default_cluster_id or project.tenant.default_cluster_id
    where = ("named", named) if named else ("cluster", default)
    key = (repr(spec["resources"]), spec["environment"]["type"] == "container", where)
    if key not in seen:
        options = submit_cache.placement(
            gens,
            key,
            lambda: placements_fitting(
                resources=spec["resources"],
                needs_containers=key[1],
                clusters=candidate_clusters(named=named, project=project),
            ),
        )
        if len(options) > 1:
            needs = totals(spec)
            index, why = soonest(options=options, gpus=needs["gpus"], cpus=needs["cpus"])
        else:
            index, why = 0, _why_only(options[0][0], named=named, project=project)
        seen[key] = (*options[index], why)
    return seen[key]


def _why_only(cluster: Cluster, *, named, project: Project) -> str:
    if named:
        return f"the spec names {cluster.name}"
    if project.default_cluster_id:
        return f"{cluster.name} is the project's default cluster"
    if project.tenant.default_cluster_id:
        return f"{cluster.name} is the tenant's default cluster"
    if cluster.is_default:
        return f"{cluster.name} is the platform's default cluster"
    return f"{cluster.name} is the only cluster that can run it"


def job_cancel(*, actor: Actor, job: Job) -> Job:
    """Cancel a job: at once if it never reached the backend, else through the backend."""
    authorize(actor, resource="job", action="cancel", tenant_id=job.tenant_id, target=job)
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state in TERMINAL:
            raise Conflict(f"The job has already ended ({job.state}).")
        audit_record(actor=actor, tenant_id=job.tenant_id, action="job.cancel", target=job)
        job_cancel_locked(job=job, reason=f"cancelled by {actor.user}")
        transaction.on_commit(lambda: request_cancel(job.pk))
    job.refresh_from_db()
    return job


def job_cancel_locked(*, job: Job, reason: str) -> bool:
    """Mark a row-locked, unfinished job for cancelling: CANCELLED at once if it never reached
    the backend. True when the backend still has to be told (cancel_backend_jobs)."""
    attempt = job.attempts.order_by("-number").first()
    on_backend = bool(
        attempt is not None
        and (attempt.backend_id or attempt.state == AttemptState.SUBMITTING)
        and attempt.state not in ATTEMPT_ENDED
    )
    job.cancel_requested = True
    job.save(update_fields=["cancel_requested", "updated_at"])
    if not on_backend:
        if attempt is not None and attempt.state == AttemptState.QUEUED:
            attempt.state, attempt.ended_at = AttemptState.CANCELLED, timezone.now()
            attempt.save(update_fields=["state", "ended_at", "updated_at"])
        job_transition(job=job, to=State.CANCELLED, reason=reason)
    return on_backend


def project_jobs_stop(*, thing: Project, reason: str) -> None:
    """An archived project's unfinished jobs are cancelled (their quota freed), inside the
    archive's transaction; the backend is told once it commits."""
    jobs = Job.objects.select_for_update().filter(project=thing, cancel_requested=False)
    for job in jobs.exclude(state__in=TERMINAL):
        if job_cancel_locked(job=job, reason=reason):
            transaction.on_commit(lambda pk=job.pk: request_cancel(pk))


def job_restart(*, actor: Actor, job: Job) -> Job:
    """Run a finished job again (from its latest checkpoint), through admission."""
    authorize(actor, resource="job", action="restart", tenant_id=job.tenant_id, target=job)
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state not in TERMINAL:
            raise Conflict(f"Only a finished job can be restarted; this one is {job.state}.")
        job.cancel_requested, job.exit_code = False, None
        job.save(update_fields=["cancel_requested", "exit_code", "updated_at"])
        job_transition(job=job, to=State.PENDING, reason=f"restarted by {actor.user}")
        audit_record(actor=actor, tenant_id=job.tenant_id, action="job.restart", target=job)
        admission.admit_tenant(tenant_id=job.tenant_id)
    job.refresh_from_db()
    return job
