"""One attempt brought in line with what its cluster says, under row locks: its backend
fields, its job's state, and at its end the usage, the restart or the job's end."""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.compute.backends.base import BackendJob
from apps.jobs import paths
from apps.jobs.attempts import attempt_open
from apps.jobs.models import ATTEMPT_ENDED, AttemptState, Job, JobAttempt
from apps.jobs.outputs import outputs_send
from apps.jobs.staging import dataset_stages_record
from apps.jobs.states import State
from apps.jobs.telemetry import restarted
from apps.jobs.transitions import job_transition
from apps.quotas.services import usage_record

RETRY_CAUSE = {
    AttemptState.NODE_FAIL: "node_failure",
    AttemptState.LOST: "node_failure",
    AttemptState.PREEMPTED: "preemption",
}


def apply(
    *, attempt_id, found: BackendJob, outcome: str, down_nodes: set[str], waiting: str = ""
) -> str:
    """Bring one attempt (and its job) in line with the cluster. Returns what happened.
    `waiting`: the backend's words for why a SUBMITTED attempt waits."""
    with transaction.atomic():
        attempt = JobAttempt.objects.select_for_update().get(pk=attempt_id)
        if attempt.state in ATTEMPT_ENDED:
            return ""
        job = Job.objects.select_for_update().select_related("tenant").get(pk=attempt.job_id)
        changed = _copy_backend_fields(attempt, found)
        if outcome == AttemptState.SUBMITTED:
            if changed:
                attempt.save()
            waiting = waiting or "waiting on the cluster"
            if job.state == State.SUBMITTED and job.queue_position != found.queue_position:
                job.queue_position = found.queue_position  # e.g. its place in Kueue's queue
                job.save(update_fields=["queue_position", "updated_at"])
                changed = True
            if job.state == State.SUBMITTED and job.state_reason != waiting:
                job_transition(job=job, to=State.SUBMITTED, reason=waiting)
                return "updated"
            return "updated" if changed else ""
        if outcome == AttemptState.RUNNING:
            attempt.state = AttemptState.RUNNING
            attempt.started_at = attempt.started_at or found.started_at or timezone.now()
            attempt.save()
            if job.state == State.SUBMITTED:
                job.queue_position = None
                nodes = ",".join(attempt.nodes)
                job_transition(
                    job=job,
                    to=State.RUNNING,
                    attempt=attempt,
                    reason=f"running on {nodes}" if nodes else "running",
                )
            return "updated"
        return _finish(
            job=job,
            attempt=attempt,
            outcome=outcome,
            found=found,
            down_nodes=down_nodes,
            transition=job_transition,
        )


def _copy_backend_fields(attempt: JobAttempt, found: BackendJob) -> bool:
    before = (attempt.backend_state, attempt.backend_reason, attempt.nodes, attempt.backend_id)
    attempt.backend_state, attempt.backend_reason = found.state, found.reason[:255]
    # Keep the nodes an attempt started on: after a node failure the backend may drop the
    # failed node from the job's list, and that node is the one the next attempt must avoid.
    if found.nodes and (not attempt.nodes or attempt.state != AttemptState.RUNNING):
        attempt.nodes = found.nodes
    if found.backend_id:
        attempt.backend_id = found.backend_id
    return before != (
        attempt.backend_state,
        attempt.backend_reason,
        attempt.nodes,
        attempt.backend_id,
    )


def _finish(
    *,
    job: Job,
    attempt: JobAttempt,
    outcome: str,
    found: BackendJob,
    down_nodes: set[str],
    transition,
) -> str:
    now = timezone.now()
    if outcome == AttemptState.FAILED and found.signal and set(attempt.nodes) & down_nodes:
        # killed by a signal on a node that is down: the node's failure (under load, Slurm's
        # record can say FAILED by the signal before the node's state reaches the job)
        outcome = AttemptState.NODE_FAIL
    attempt.state = outcome
    attempt.ended_at = found.ended_at if found.ended_at and found.ended_at <= now else now
    if attempt.started_at is None and found.started_at and found.started_at <= attempt.ended_at:
        attempt.started_at = found.started_at
    attempt.exit_code, attempt.signal = found.exit_code, found.signal
    attempt.reason = _describe(outcome, found)
    attempt.save()
    usage_record(attempt=attempt)
    dataset_stages_record(attempt=attempt)
    job.exit_code = found.exit_code
    latest = paths.latest_checkpoint(job.checkpoint_dir)
    if latest:
        job.latest_checkpoint, job.latest_checkpoint_at = latest, now
    job.save(update_fields=["exit_code", "latest_checkpoint", "latest_checkpoint_at", "updated_at"])

    if job.state not in (State.SUBMITTED, State.RUNNING):
        return "ended"
    policy = job.spec["restart_policy"]
    cause = RETRY_CAUSE.get(outcome)
    retryable = (cause in policy["retry_on"]) or (
        outcome == AttemptState.FAILED and found.exit_code in policy["exit_codes"]
    )
    if outcome == AttemptState.SUCCEEDED:
        transition(job=job, to=State.SUCCEEDED, attempt=attempt, reason="exit code 0")
        outputs_send(attempt=attempt)
    elif outcome == AttemptState.CANCELLED or job.cancel_requested:
        who = "by request" if job.cancel_requested else "on the cluster"
        reason = f"cancelled {who}"
        if job.cancel_requested and job.state_reason.startswith("cancelling: "):
            reason = "cancelled: " + job.state_reason.removeprefix("cancelling: ")  # why (idle)
        transition(job=job, to=State.CANCELLED, attempt=attempt, reason=reason)
    elif outcome == AttemptState.TIMEOUT:
        limit = job.spec["resources"]["time_limit"]
        transition(
            job=job,
            to=State.TIMEOUT,
            attempt=attempt,
            reason=f"time limit of {limit} minutes reached",
        )
    elif retryable and job.restart_count < policy["max_restarts"]:
        failed = sorted(set(attempt.nodes) & down_nodes)
        job.restart_count += 1
        job.save(update_fields=["restart_count"])
        restarted(cause=cause or "exit_code")
        new = attempt_open(job=job)
        new.excluded_nodes = sorted(set(new.excluded_nodes) | set(failed))
        new.not_before = now + timedelta(seconds=policy["backoff_seconds"])
        new.save(update_fields=["excluded_nodes", "not_before"])
        resume = f"resumes from {new.resume_from}" if new.resume_from else "starts afresh"
        where = f" on {', '.join(failed)}" if failed else ""
        transition(
            job=job,
            to=State.RESTARTING,
            attempt=new,
            reason=(
                f"attempt {attempt.number} ended {outcome}{where}; attempt {new.number}"
                f" (restart {job.restart_count} of {policy['max_restarts']}) {resume}"
                + (f", avoiding {', '.join(new.excluded_nodes)}" if new.excluded_nodes else "")
            ),
        )
        return "restarted"
    else:
        left = " (no restarts left)" if retryable else ""
        transition(job=job, to=State.FAILED, attempt=attempt, reason=attempt.reason + left)
    return "ended"


def _describe(outcome: str, found: BackendJob) -> str:
    if outcome == AttemptState.SUCCEEDED:
        return "exit code 0"
    if outcome == AttemptState.FAILED:
        if found.signal:
            return f"killed by signal {found.signal}"
        detail = f" ({found.reason})" if found.reason and found.reason != "None" else ""
        return f"exit code {found.exit_code}{detail}"
    return f"{outcome.lower().replace('_', ' ')}" + (f": {found.reason}" if found.reason else "")
