"""The reconciler's pass: one per cluster moves every job to what the cluster says (one
attempt's change: reconcile_apply.py; the pass's upkeep steps: reconcile_upkeep.py).

A pass makes a constant number of controller calls whatever the number of jobs: the job
list, the node list and the partition list, plus one accounting query only when a tracked
job has left the controller's memory, and one call per job that has just become starving
while the size order still holds it back in the cluster's queue (unstarve). A controller that
does not answer fails no job.
"""

import contextlib
import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from apps.compute.backends import for_cluster
from apps.compute.backends.base import BackendJob, ClusterUnavailable, SubmitRejected
from apps.compute.models import Cluster
from apps.compute.services import inventory_store
from apps.core.models import PassFailure
from apps.core.passes import Pass, describe
from apps.jobs import cluster_limits, paths
from apps.jobs.admission import admit_tenant
from apps.jobs.models import ATTEMPT_ENDED, AttemptState, Job, JobAttempt
from apps.jobs.reconcile_apply import apply
from apps.jobs.reconcile_upkeep import (
    cancel_requested,
    cancel_strays,
    release_restarts,
    track_checkpoints,
    unstarve,
    uuids_valid,
)
from apps.jobs.staging import dataset_stages_record
from apps.jobs.states import State
from apps.jobs.transitions import job_transition

logger = logging.getLogger(__name__)
# The backend state of an attempt the cluster lost or failed after its program had ended,
# ended by the exit status its launcher left (paths.exit_status).
ENDED_BY_ITS_STATUS = "ENDED"
# The reconcile pass's failures (apps/core/passes.py), one item per attempt: an attempt whose
# state cannot be applied is left for the next pass, and failed with the reason once it has
# failed GIVE_UP_AFTER passes in a row; the other attempts reconcile.
PASS = Pass("reconcile")
GIVE_UP_AFTER = 5


def reconcile_cluster(*, cluster_id) -> dict:
    cluster = Cluster.objects.get(pk=cluster_id)
    backend = for_cluster(cluster)
    stats = {"updated": 0, "ended": 0, "restarted": 0, "rpcs": 0, "unstarved": 0}
    tracked = list(
        JobAttempt.objects.filter(
            job__cluster=cluster,
            state__in=[AttemptState.SUBMITTED, AttemptState.RUNNING],
        ).select_related("job", "job__tenant", "job__project")
    )
    try:
        backend_jobs = backend.jobs()
        partitions, nodes = backend.inventory()
        stats["rpcs"] += 3
    except ClusterUnavailable as exc:
        _cluster_down(cluster=cluster, error=str(exc))
        return stats
    if not cluster.healthy:
        logger.info("cluster %s answers again", cluster.name)
    inventory_store(cluster=cluster, partitions=partitions, nodes=nodes)
    # Nodes that cannot run work: unhealthy ones, and (where the backend drops lost nodes
    # from its list, as Kubernetes does a deleted Node) any node no longer listed.
    down = {node.name for node in nodes if not node.healthy}
    listed = {node.name for node in nodes}
    if listed:
        down |= {n for a in tracked for n in a.nodes if n not in listed}
    by_tag: dict[str, BackendJob] = {}
    for job in backend_jobs:  # several jobs with one tag: the backend's order says which is current
        known = by_tag.get(job.tag)
        if known is None or job.order > known.order:
            by_tag[job.tag] = job
    missing = {a.tag for a in tracked if a.tag not in by_tag}
    if missing:
        since = min(a.submitted_at or a.created_at for a in tracked if a.tag in missing)
        try:
            for job in backend.accounting(tags=missing, since=since - timedelta(minutes=5)):
                by_tag.setdefault(job.tag, job)
            stats["rpcs"] += 1
        except ClusterUnavailable as exc:
            logger.warning("accounting of %s unavailable: %s", cluster.name, exc)
            return stats
    tenants_with_room = set()
    for attempt in tracked:  # one by one: one that raises is left for the next pass
        with PASS.item(f"attempt:{attempt.pk}", on_failure=_unreconciled(attempt.pk)):
            found = by_tag.get(attempt.tag)
            if found is None:
                age = timezone.now() - (attempt.submitted_at or attempt.created_at)
                if age.total_seconds() < settings.TORUS_LOST_AFTER_SECONDS:
                    continue
                found = BackendJob(
                    backend_id=attempt.backend_id,
                    tag=attempt.tag,
                    state="LOST",
                    reason="the cluster has no record of this job",
                )
                outcome = AttemptState.LOST
            else:
                outcome = backend.attempt_outcome(found)
                if (
                    outcome == AttemptState.SUBMITTED
                    and (attempt.state == AttemptState.RUNNING or found.restarts)
                    and getattr(backend, "requeues_jobs", False)
                ):
                    outcome = _take_back_requeued(backend, found)
            if outcome in (AttemptState.NODE_FAIL, AttemptState.LOST):
                outcome = _ended_by_its_status(attempt, found, outcome)
            waiting = backend.waiting_message(found) if outcome == AttemptState.SUBMITTED else ""
            if _unchanged(attempt, found, outcome) and (
                not waiting
                or attempt.job.state != State.SUBMITTED
                or (attempt.job.state_reason, attempt.job.queue_position)
                == (waiting, found.queue_position)
            ):
                continue  # most attempts, most passes: no transaction, no row lock
            result = apply(
                attempt_id=attempt.pk,
                found=found,
                outcome=outcome,
                down_nodes=down,
                waiting=waiting,
            )
            if result:
                stats["updated"] += 1
            if result in ("ended", "restarted"):
                stats["ended"] += 1
                tenants_with_room.add(attempt.job.tenant_id)
            if result == "restarted":
                stats["restarted"] += 1

    _settle(tracked=tracked)

    def step(name: str):  # each by itself: one that raises keeps no other from running
        return PASS.item(f"{cluster.name}:{name}", atomic=False)

    with step("release_restarts"):
        release_restarts(cluster=cluster)
    with step("track_checkpoints"):
        track_checkpoints(cluster=cluster)
    with step("track_dataset_stages"):
        track_dataset_stages(cluster=cluster)
    with step("cancel_requested"):
        cancel_requested(cluster=cluster, backend=backend, by_tag=by_tag)
    with step("unstarve"):
        stats["unstarved"] = unstarve(
            cluster=cluster, backend=backend, tracked=tracked, by_tag=by_tag
        )
    with step("cancel_strays"):
        cancel_strays(cluster=cluster, backend=backend, backend_jobs=backend_jobs, tracked=tracked)
    stats["rpcs"] += stats["unstarved"]
    Cluster.objects.filter(pk=cluster.pk).update(
        healthy=True, last_error="", last_reconciled_at=timezone.now()
    )
    try:  # the tenant GPU limits the cluster holds, with what it lends (a change only)
        cluster_limits.sync(cluster=cluster, backend=backend)
    except (ClusterUnavailable, SubmitRejected) as exc:  # the next pass tries again
        logger.warning("GPU limits on %s not set: %s", cluster.name, exc)
    for tenant_id in tenants_with_room:
        admit_tenant(tenant_id=tenant_id)
    return stats


def _settle(*, tracked: list) -> None:
    """Clear the open failures of attempts no longer followed (ended, failed by
    _unreconciled, gone): no query while none is open."""
    followed = {str(attempt.pk) for attempt in tracked}
    keys = [
        key
        for key in PASS.open()
        if key.startswith("attempt:") and key.removeprefix("attempt:") not in followed
    ]
    if not keys:
        return
    ids = uuids_valid(key.removeprefix("attempt:") for key in keys)
    live = JobAttempt.objects.filter(
        pk__in=ids, state__in=[AttemptState.SUBMITTED, AttemptState.RUNNING]
    ).values_list("pk", flat=True)
    live = {f"attempt:{pk}" for pk in live}  # (another cluster's)
    PASS.forget(keys=[key for key in keys if key not in live])


def _unreconciled(attempt_id):
    """The marking of an attempt whose state could not be applied: left for the next pass,
    until GIVE_UP_AFTER passes in a row have failed; then the attempt (and its job, if it was
    on it) fails with the reason, and a cluster job of it still running is cancelled by the
    next pass (cancel_strays)."""

    def mark(error) -> None:
        before = PassFailure.objects.filter(
            pass_name=PASS.name, item_key=f"attempt:{attempt_id}"
        ).values_list("count", flat=True)
        if (before.first() or 0) + 1 < GIVE_UP_AFTER:
            return
        reason = f"could not be reconciled: {describe(error)}"
        attempt = JobAttempt.objects.select_for_update().get(pk=attempt_id)
        if attempt.state in ATTEMPT_ENDED:
            return
        job = Job.objects.select_for_update().get(pk=attempt.job_id)
        attempt.state, attempt.ended_at, attempt.reason = (
            AttemptState.FAILED,
            timezone.now(),
            reason[:2000],
        )
        attempt.save(update_fields=["state", "ended_at", "reason", "updated_at"])
        if job.state in (State.SUBMITTED, State.RUNNING):
            job_transition(job=job, to=State.FAILED, attempt=attempt, reason=reason)

    return mark


def _cluster_down(*, cluster: Cluster, error: str) -> None:
    """The cluster did not answer: marked unhealthy with the error (its health and
    last_error say so as long as it lasts); a warning once per outage, by the pass that
    turned it unhealthy, then debug lines (a pass runs every few seconds)."""
    error = error[:2000]
    turned = Cluster.objects.filter(pk=cluster.pk, healthy=True).update(
        healthy=False, last_error=error
    )
    if not turned:
        Cluster.objects.filter(pk=cluster.pk).update(last_error=error)
    log = logger.warning if turned else logger.debug
    log("cluster %s did not answer: %s", cluster.name, error)


def _unchanged(attempt: JobAttempt, found: BackendJob, outcome: str) -> bool:
    """True when the cluster reports exactly what the attempt row already says."""
    return (
        outcome == attempt.state
        and outcome in (AttemptState.SUBMITTED, AttemptState.RUNNING)
        and found.state == attempt.backend_state
        and found.reason[:255] == attempt.backend_reason
        and found.backend_id == attempt.backend_id
        and (
            not found.nodes or found.nodes == attempt.nodes or attempt.state == AttemptState.RUNNING
        )
    )


def _ended_by_its_status(attempt: JobAttempt, found: BackendJob, outcome: str) -> str:
    """A node failure or a lost job, unless the attempt's launcher left the program's exit
    status: then the program had ended and the cluster lost only that (slurmctld SIGKILLed
    before it saved the end forgets the job, or requeues it as missing from its node), and
    the attempt ends with that status instead of running again."""
    status = paths.exit_status(attempt.job, attempt.number)
    if status is None:
        return outcome
    found.state, found.exit_code, found.signal = ENDED_BY_ITS_STATUS, status, None
    found.reason = f"{found.reason}; the program had ended with exit status {status}"
    return AttemptState.SUCCEEDED if status == 0 else AttemptState.FAILED


def _take_back_requeued(backend, found: BackendJob) -> str:
    """The backend put a started job back in its queue (Slurm: a requeue after a node failure,
    or by an operator). Torus restarts attempts itself, from the latest checkpoint and avoiding
    the failed node, so the requeued job is cancelled and the attempt ends as a node failure."""
    with contextlib.suppress(ClusterUnavailable):  # else the next pass sees it and retries
        backend.cancel(found.backend_id)
    found.reason = f"requeued by {backend.display_name} ({found.reason or 'no reason given'})"
    return AttemptState.NODE_FAIL


def track_dataset_stages(*, cluster: Cluster) -> None:
    """Record the staging reports of running attempts that have none yet, so the cache's
    figures show while a long job runs (the attempt's end records them again, whole)."""
    for attempt in (
        JobAttempt.objects.filter(
            job__cluster=cluster, state=AttemptState.RUNNING, dataset_stages__isnull=True
        )
        .exclude(job__spec__datasets=[])
        .exclude(job__spec__datasets__isnull=True)
        .select_related("job", "job__project__tenant")
    ):
        with PASS.item(f"stages:{attempt.pk}"):  # one unreadable report stops no other
            dataset_stages_record(attempt=attempt)
