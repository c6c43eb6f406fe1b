"""The one writer of a job's state: checked transitions and their events, announced live."""

from django.db import transaction
from django.utils import timezone

from apps.jobs import extras
from apps.jobs.models import Job, JobEvent
from apps.jobs.states import TERMINAL, State, check_transition

TRANSITION_FIELDS = [
    "state",
    "state_reason",
    "admitted_at",
    "started_at",
    "finished_at",
    "queue_position",
    "updated_at",
]


def transition_in_memory(*, job: Job, to: str, reason: str = "", attempt=None) -> JobEvent:
    """Apply a checked transition to a (row-locked) job object and return its unsaved event.
    Callers save the job's TRANSITION_FIELDS and the event, one by one or in bulk."""
    check_transition(job.state, to)
    now = timezone.now()
    event = JobEvent(job=job, attempt=attempt, from_state=job.state, to_state=to, reason=reason)
    job.state, job.state_reason, job.updated_at = to, reason, now
    if to == State.QUEUED and job.admitted_at is None:
        job.admitted_at = now
    if to == State.RUNNING and job.started_at is None:
        job.started_at = now
    if to in TERMINAL:
        job.finished_at, job.queue_position = now, None
    if to == State.PENDING:
        job.finished_at = None
    return event


def job_transition(*, job: Job, to: str, reason: str = "", attempt=None) -> JobEvent | None:
    """Move a (row-locked) job to `to`, recording the event; a no-op if already there."""
    if job.state == to:
        if reason and reason != job.state_reason:
            job.state_reason = reason
            job.save(update_fields=["state_reason", "updated_at"])
        return None
    event = transition_in_memory(job=job, to=to, reason=reason, attempt=attempt)
    events_record(events=[event])
    job.save(update_fields=TRANSITION_FIELDS)
    return event


def events_record(*, events: list[JobEvent]) -> None:
    """Save state-change events; once the transaction commits, push them to the jobs' live
    viewers (/ws/jobs/{id}/)."""
    if not events:
        return
    JobEvent.objects.bulk_create(events)
    events_announce(events=events)


def events_announce(*, events: list[JobEvent]) -> None:
    """Push saved state-change events to the jobs' live viewers once they are committed
    (the announcers registered in apps/jobs/extras.py)."""
    transaction.on_commit(lambda: extras.announce(events=events))
