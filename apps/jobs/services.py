"""Writes for jobs: submit, cancel, restart, and the one function that changes a job's state."""

import logging

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from apps.compute.placement import choose_placement
from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.jobs import paths
from apps.jobs.models import ATTEMPT_ENDED, AttemptState, Job, JobAttempt, JobEvent
from apps.jobs.spec import normalise, totals
from apps.jobs.states import ACTIVE, TERMINAL, State, check_transition
from apps.tenancy.audit import audit_record
from apps.tenancy.models import Project, Role
from apps.tenancy.policies import has_role

logger = logging.getLogger(__name__)


def job_transition(*, job: Job, to: str, reason: str = "", attempt=None) -> JobEvent | None:
    """Move a (row-locked) job to `to`, recording the event; a no-op if already there."""
    if job.state == to:
        if reason and reason != job.state_reason:
            job.state_reason = reason
            job.save(update_fields=["state_reason", "updated_at"])
        return None
    check_transition(job.state, to)
    now = timezone.now()
    event = JobEvent.objects.create(
        job=job, attempt=attempt, from_state=job.state, to_state=to, reason=reason
    )
    job.state, job.state_reason = to, reason
    fields = ["state", "state_reason", "updated_at"]
    if to == State.QUEUED and job.admitted_at is None:
        job.admitted_at, fields = now, [*fields, "admitted_at"]
    if to == State.RUNNING and job.started_at is None:
        job.started_at, fields = now, [*fields, "started_at"]
    if to in TERMINAL:
        job.finished_at, job.queue_position = now, None
        fields += ["finished_at", "queue_position"]
    if to == State.PENDING:
        job.finished_at, fields = None, [*fields, "finished_at"]
    job.save(update_fields=fields)
    return event


def _require_project_access(*, actor: Actor, project: Project) -> None:
    if actor.read_only:
        raise PermissionDenied("This access token is read-only.")
    tenant_id = project.tenant_id
    if has_role(actor, tenant_id=tenant_id, minimum=Role.ADMIN):
        return
    if (
        has_role(actor, tenant_id=tenant_id, minimum=Role.MEMBER)
        and project.members.filter(user=actor.user).exists()
    ):
        return
    raise PermissionDenied(f"You need to be a member of project {project.slug} to run jobs in it.")


def job_submit(*, actor: Actor, project: Project, spec: dict) -> Job:
    """Create a job from a validated spec, admit it if it fits, and dispatch after commit."""
    from apps.quotas.admission import admit_tenant

    _require_project_access(actor=actor, project=project)
    spec = normalise(spec)
    cluster, partition = choose_placement(
        resources=spec["resources"],
        needs_containers=spec["environment"]["type"] == "container",
    )
    with transaction.atomic():
        job = Job.objects.create(
            tenant_id=project.tenant_id,
            project=project,
            user=actor.user,
            name=spec["name"],
            kind=spec["kind"],
            spec=spec,
            labels=spec["labels"],
            priority=spec["priority"],
            cluster=cluster,
            partition=partition,
            **totals(spec),
        )
        job.checkpoint_dir = str(paths.checkpoint_dir(job))
        job.save(update_fields=["checkpoint_dir"])
        JobEvent.objects.create(job=job, to_state=State.PENDING, reason="submitted")
        audit_record(
            actor=actor,
            tenant_id=job.tenant_id,
            action="job.create",
            target=job,
            changes={"name": [None, job.name], "project": [None, project.slug]},
        )
        admit_tenant(tenant_id=job.tenant_id)
    job.refresh_from_db()
    return job


def attempt_open(*, job: Job, reason: str = "") -> JobAttempt:
    """A new attempt for a job, resuming from its latest checkpoint, avoiding failed nodes."""
    previous = job.attempts.order_by("-number").first()
    number = previous.number + 1 if previous else 1
    directory = paths.attempt_dir(job, number)
    directory.mkdir(parents=True, exist_ok=True)
    paths.checkpoint_dir(job).mkdir(parents=True, exist_ok=True)
    latest = paths.latest_checkpoint(job.checkpoint_dir)
    if latest and latest != job.latest_checkpoint:
        job.latest_checkpoint, job.latest_checkpoint_at = latest, timezone.now()
        job.save(update_fields=["latest_checkpoint", "latest_checkpoint_at"])
    return JobAttempt.objects.create(
        job=job,
        number=number,
        state=AttemptState.QUEUED,
        excluded_nodes=list(previous.excluded_nodes) if previous else [],
        resume_from=latest,
        reason=reason,
        stdout_path=str(directory / "stdout.log"),
        stderr_path=str(directory / "stderr.log"),
    )


def _authorize_job_action(*, actor: Actor, job: Job) -> None:
    if actor.read_only:
        raise PermissionDenied("This access token is read-only.")
    if job.user_id == actor.user.pk and has_role(
        actor, tenant_id=job.tenant_id, minimum=Role.MEMBER
    ):
        return
    if has_role(actor, tenant_id=job.tenant_id, minimum=Role.ADMIN):
        return
    raise PermissionDenied("Only the job's owner or a tenant admin can do that.")


def job_cancel(*, actor: Actor, job: Job) -> Job:
    """Cancel a job: at once if it never reached the backend, else through the backend."""
    from apps.jobs.tasks import cancel_backend_jobs

    _authorize_job_action(actor=actor, job=job)
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state in TERMINAL:
            raise Conflict(f"The job has already ended ({job.state}).")
        attempt = job.attempts.order_by("-number").first()
        on_backend = (
            attempt is not None
            and (attempt.backend_id or attempt.state == AttemptState.SUBMITTING)
            and attempt.state not in ATTEMPT_ENDED
        )
        job.cancel_requested = True
        job.save(update_fields=["cancel_requested", "updated_at"])
        audit_record(actor=actor, tenant_id=job.tenant_id, action="job.cancel", target=job)
        if not on_backend:
            if attempt is not None and attempt.state == AttemptState.QUEUED:
                attempt.state, attempt.ended_at = AttemptState.CANCELLED, timezone.now()
                attempt.save(update_fields=["state", "ended_at", "updated_at"])
            job_transition(job=job, to=State.CANCELLED, reason=f"cancelled by {actor.user}")
        transaction.on_commit(lambda: cancel_backend_jobs.delay(str(job.pk)))
    job.refresh_from_db()
    return job


def job_restart(*, actor: Actor, job: Job) -> Job:
    """Run a finished job again (from its latest checkpoint), through admission."""
    from apps.quotas.admission import admit_tenant

    _authorize_job_action(actor=actor, job=job)
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state not in TERMINAL:
            raise Conflict(f"Only a finished job can be restarted; this one is {job.state}.")
        job.cancel_requested, job.exit_code = False, None
        job.save(update_fields=["cancel_requested", "exit_code", "updated_at"])
        job_transition(job=job, to=State.PENDING, reason=f"restarted by {actor.user}")
        audit_record(actor=actor, tenant_id=job.tenant_id, action="job.restart", target=job)
        admit_tenant(tenant_id=job.tenant_id)
    job.refresh_from_db()
    return job


def active_states() -> list[str]:
    return [s.value for s in ACTIVE]
