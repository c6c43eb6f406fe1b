"""The reconcile pass's upkeep steps on a cluster: restarts released after their backoff,
checkpoints tracked, cancels re-issued, starving jobs' nice cleared, strays cancelled."""

import contextlib
import logging
import uuid

from django.db import transaction
from django.utils import timezone

from apps.compute.backends.base import ClusterUnavailable, SubmitRejected
from apps.compute.models import Cluster
from apps.jobs import paths
from apps.jobs.models import ATTEMPT_ENDED, AttemptState, Job, JobAttempt
from apps.jobs.priority import starving
from apps.jobs.states import State
from apps.jobs.transitions import job_transition
from apps.jobs.wake import request_dispatch

logger = logging.getLogger(__name__)


def release_restarts(*, cluster: Cluster) -> int:
    """RESTARTING jobs whose backoff is over go back to QUEUED for the dispatcher."""
    now, released = timezone.now(), 0
    due = (
        JobAttempt.objects.filter(
            job__cluster=cluster,
            job__state=State.RESTARTING,
            state=AttemptState.QUEUED,
        )
        .exclude(not_before__gt=now)
        .values_list("pk", flat=True)
    )
    for attempt_id in due:
        with transaction.atomic():
            attempt = JobAttempt.objects.select_for_update().get(pk=attempt_id)
            job = Job.objects.select_for_update().get(pk=attempt.job_id)
            if job.state != State.RESTARTING:
                continue
            job_transition(
                job=job,
                to=State.QUEUED,
                attempt=attempt,
                reason=f"attempt {attempt.number} ready to dispatch",
            )
            released += 1
    if released:
        transaction.on_commit(lambda: request_dispatch(cluster.pk))
    return released


def track_checkpoints(*, cluster: Cluster) -> None:
    """Record the newest checkpoint of every running job (a file read each; no RPC)."""
    for job in Job.objects.filter(cluster=cluster, state=State.RUNNING).only(
        "id", "checkpoint_dir", "latest_checkpoint"
    ):
        latest = paths.latest_checkpoint(job.checkpoint_dir)
        if latest and latest != job.latest_checkpoint:
            Job.objects.filter(pk=job.pk).update(
                latest_checkpoint=latest, latest_checkpoint_at=timezone.now()
            )


def unstarve(*, cluster: Cluster, backend, tracked: list, by_tag: dict) -> int:
    """Give a starving job (apps/jobs/priority.py) that still waits in the cluster's queue
    with a nice its submission rank back (nice 0): the size order passes a big job for at
    most the starving time there too. Once per job: the next listing shows nice 0. Returns
    the calls made."""
    now, calls = timezone.now(), 0
    for attempt in tracked:
        found = by_tag.get(attempt.tag)
        if found is None or found.nice <= 0 or not starving(attempt.job, now=now):
            continue
        if backend.attempt_outcome(found) != AttemptState.SUBMITTED:
            continue
        logger.info(
            "job %s starving on %s: nice %s of %s cleared",
            attempt.job_id, cluster.name, found.nice, found.backend_id,
        )  # fmt: skip
        try:
            backend.clear_nice(found.backend_id)
        except ClusterUnavailable:
            return calls  # the next pass tries again
        except SubmitRejected as exc:  # started or ended meanwhile: nothing left to do
            logger.info("nice of %s not cleared: %s", found.backend_id, exc)
        calls += 1
    return calls


def cancel_strays(*, cluster: Cluster, backend, backend_jobs: list, tracked: list) -> None:
    """Cancel the cluster's queued or running jobs of attempts that have ended: a controller
    that lost its last moments (slurmctld SIGKILLed after a job ended, before it saved that)
    finds the job missing from its node and puts it back in the queue, requeue or not; left
    there, it would run a second time, unseen."""
    tracked_tags = {attempt.tag for attempt in tracked}
    live = {}
    for job in backend_jobs:
        ours = job.tag.startswith("torus:") and job.tag not in tracked_tags
        if ours and backend.attempt_outcome(job) not in ATTEMPT_ENDED:
            live.setdefault(job.tag.removeprefix("torus:"), []).append(job)
    if not live:
        return
    ended = JobAttempt.objects.filter(
        job__cluster=cluster, pk__in=uuids_valid(live), state__in=ATTEMPT_ENDED
    ).values_list("pk", "state")
    for attempt_id, state in ended:
        for job in live[str(attempt_id)]:
            logger.warning(
                "cancelling %s job %s: its attempt %s has ended (%s)",
                cluster.name, job.backend_id, attempt_id, state,
            )  # fmt: skip
            try:
                backend.cancel(job.backend_id)
            except ClusterUnavailable:
                return  # the next pass tries again


def uuids_valid(values) -> list[uuid.UUID]:
    out = []
    for value in values:
        with contextlib.suppress(ValueError):
            out.append(uuid.UUID(value))
    return out


def cancel_requested(*, cluster: Cluster, backend, by_tag: dict) -> None:
    """Re-issue the cancel of jobs whose cancel has not reached the cluster yet."""
    attempts = JobAttempt.objects.filter(
        job__cluster=cluster,
        job__cancel_requested=True,
        state__in=[AttemptState.SUBMITTED, AttemptState.RUNNING],
    ).exclude(backend_id="")
    for attempt in attempts:
        found = by_tag.get(attempt.tag)
        if found is None or backend.attempt_outcome(found) in ATTEMPT_ENDED:
            continue
        try:
            backend.cancel(attempt.backend_id)
        except ClusterUnavailable:
            return
