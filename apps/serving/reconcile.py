"""The deployments' reconciler: one pass (the Celery beat task `serving.reconcile`, every
TORUS_SERVING_RECONCILE_SECONDS) brings every deployment towards what it asks for.

Per deployment, first each replica is observed without holding any lock (its job's state,
serve.json, /health, a one-token completion, /metrics) and moved on by itself:

  STARTING  -> READY       its job runs, /health answers and a completion works
  STARTING  -> UNHEALTHY   not ready TORUS_SERVING_START_TIMEOUT_S after its job started
  READY     -> UNHEALTHY   /health failed TORUS_SERVING_HEALTH_FAILURES times in a row
  DRAINING  -> (cancelled) no request in flight (routes.inflight) or the drain timed out
  any       -> STOPPED     its job ended (a replica that ended by itself is replaced)

then, under the deployment's row lock: a followed alias that moved starts a rolling update;
replicas are started or drained towards replicas_desired (autoscale.py sets it from the
engines' metrics, and to 0 after scale_to_zero_after_s without a request); a rollout drains
the old version's replicas once the new version has replicas_desired READY ones; and the
deployment's state is set from its replicas'. Every routing change is published on commit.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from apps.core.passes import Pass, describe
from apps.jobs.models import Job
from apps.jobs.states import State
from apps.serving import autoscale, listeners, replicas, routes, selectors
from apps.serving.models import (
    REPLICA_LIVE,
    Deployment,
    DeploymentEvent,
    DeploymentState,
    EventKind,
    Replica,
    ReplicaState,
)
from apps.serving.services import (
    event_record,
    fit_check,
    replica_mark_unhealthy,
    rollout_begin,
)

logger = logging.getLogger(__name__)
# the pass's failures (apps/core/passes.py), one item per deployment
PASS = Pass("serving")


@dataclass
class Observed:
    """What one pass read from a deployment's replicas (metrics of the READY ones)."""

    metrics: dict = field(default_factory=dict)  # replica id -> {processing, deferred, ...}


def reconcile_all() -> int:
    """One pass over every deployment that is not stopped; the number looked at."""
    ids = list(
        Deployment.objects.exclude(state=DeploymentState.STOPPED).values_list("pk", flat=True)
    )
    for deployment_id in ids:  # one deployment's trouble does not stop the others'
        # (no transaction around it: its replicas are observed without holding any lock)
        with PASS.item(
            f"deployment:{deployment_id}", on_failure=_unreconciled(deployment_id), atomic=False
        ):
            reconcile_deployment(deployment_id=deployment_id)
    return len(ids)


def _unreconciled(deployment_id):
    """A deployment whose pass raised says so in its state_reason (its owner reads it); its
    state and replicas are left as they were for the next pass."""

    def mark(error) -> None:
        Deployment.objects.filter(pk=deployment_id).exclude(state=DeploymentState.STOPPED).update(
            state_reason=f"could not be reconciled: {describe(error)}"[:2000]
        )

    return mark


def reconcile_deployment(*, deployment_id) -> None:
    deployment = (
        Deployment.objects.select_related("version", "model").filter(pk=deployment_id).first()
    )
    if deployment is None:
        return
    observed = Observed()
    rows = deployment.replicas.exclude(state=ReplicaState.STOPPED).select_related("job")
    for replica in rows:
        replica.deployment = deployment
        observe(replica=replica, observed=observed)
    converge(deployment_id=deployment_id, observed=observed)


# -- one replica --------------------------------------------------------------------------------


def _move(replica: Replica, *, to: str, reason: str = "", **fields) -> bool:
    """Move a replica from the state it was read in (a concurrent move wins: False)."""
    now = timezone.now()
    done = Replica.objects.filter(pk=replica.pk, state=replica.state).update(
        state=to, state_reason=reason[:2000], updated_at=now, **fields
    )
    if done:
        replica.state, replica.state_reason = to, reason
        for key, value in fields.items():
            setattr(replica, key, value)
        routes.publish_on_commit(deployment_id=replica.deployment_id)
    return bool(done)


def observe(*, replica: Replica, observed: Observed) -> None:
    job: Job | None = replica.job
    if replicas.job_ended(job):
        _ended(replica=replica, job=job)
        return
    if replica.state == ReplicaState.STARTING:
        _starting(replica=replica, job=job)
    elif replica.state == ReplicaState.READY:
        _ready(replica=replica, observed=observed)
    elif replica.state == ReplicaState.DRAINING:
        deadline = replica.updated_at + timedelta(seconds=settings.TORUS_SERVING_DRAIN_TIMEOUT_S)
        if routes.inflight(replica_id=replica.pk) == 0 or timezone.now() > deadline:
            with transaction.atomic():
                replicas.replica_cancel(replica=replica)
    elif replica.state == ReplicaState.UNHEALTHY:
        with transaction.atomic():
            replicas.replica_cancel(replica=replica)


def _ended(*, replica: Replica, job: Job | None) -> None:
    expected = replica.state in (ReplicaState.DRAINING, ReplicaState.UNHEALTHY) or (
        job is not None and job.cancel_requested
    )
    how = f"its job ended: {job.state} {job.state_reason}".strip() if job else "its job is gone"
    if job is not None and not expected and job.state == State.FAILED:
        tail = replicas.log_tail(job=job)
        how = f"{how}; its output ended: {tail}" if tail else how
    with transaction.atomic():
        # a start failure: the engine exited before it was ever ready (not a cancel by someone)
        failed = not expected and replica.ready_at is None and job is not None
        failed = failed and job.state == State.FAILED
        if not _move(
            replica,
            to=ReplicaState.STOPPED,
            reason=how,
            stopped_at=timezone.now(),
            failures=replica.failures + (1 if failed else 0),
        ):
            return
        if expected:
            event_record(
                deployment=replica.deployment,
                kind=EventKind.REPLICA_STOPPED,
                message=f"replica {str(replica.pk)[:8]} stopped",
                data={"replica": str(replica.pk)},
            )
        else:
            event_record(
                deployment=replica.deployment,
                kind=EventKind.REPLICA_REPLACED,
                message=f"replica {str(replica.pk)[:8]}: {how}; a new one starts",
                data={"replica": str(replica.pk), "job_state": job.state if job else None},
            )


def _starting(*, replica: Replica, job: Job) -> None:
    if job.state != State.RUNNING:
        return
    if replica.port is None:
        endpoint = replicas.read_endpoint(job=job)
        if endpoint is None:
            _start_timeout(replica=replica, job=job)
            return
        replica.host, replica.port = endpoint
        Replica.objects.filter(pk=replica.pk).update(host=replica.host, port=replica.port)
    if not (replicas.health_ok(replica=replica) and replicas.completion_ok(replica=replica)):
        _start_timeout(replica=replica, job=job)
        return
    now = timezone.now()
    with transaction.atomic():
        if not _move(replica, to=ReplicaState.READY, ready_at=now, last_ok_at=now, failures=0):
            return
        took = (now - replica.created_at).total_seconds()
        event_record(
            deployment=replica.deployment,
            kind=EventKind.REPLICA_READY,
            message=f"replica {str(replica.pk)[:8]} ready in {took:.1f} s",
            data={"replica": str(replica.pk), "seconds": round(took, 3)},
        )
        _cold_start_done(deployment_id=replica.deployment_id, now=now)


def _cold_start_done(*, deployment_id, now) -> None:
    """The first replica READY after a wake: the cold-start time goes into the `woken` event."""
    deployment = Deployment.objects.select_for_update().get(pk=deployment_id)
    if deployment.woken_at is None:
        return
    seconds = round((now - deployment.woken_at).total_seconds(), 3)
    event = (
        DeploymentEvent.objects.filter(deployment=deployment, kind=EventKind.WOKEN)
        .order_by("-created_at")
        .first()
    )
    if event is not None:
        event.data = {**event.data, "cold_start_s": seconds}
        event.message = f"{event.message}; first replica ready after {seconds:.1f} s"
        event.save(update_fields=["data", "message", "updated_at"])
    Deployment.objects.filter(pk=deployment_id).update(woken_at=None)


def _start_timeout(*, replica: Replica, job: Job) -> None:
    started = job.started_at or replica.created_at
    limit = timedelta(seconds=settings.TORUS_SERVING_START_TIMEOUT_S)
    if timezone.now() - started > limit:
        with transaction.atomic():
            if _move(replica, to=ReplicaState.UNHEALTHY, reason="not ready in time"):
                replicas.replica_cancel(replica=replica)


def _ready(*, replica: Replica, observed: Observed) -> None:
    if replicas.health_ok(replica=replica):
        now = timezone.now()
        stale = replica.last_ok_at is None or now - replica.last_ok_at > timedelta(seconds=10)
        if replica.failures or stale:
            Replica.objects.filter(pk=replica.pk).update(last_ok_at=now, failures=0)
        deployment = replica.deployment
        if deployment.replicas_max > deployment.replicas_min:
            metrics = replicas.read_metrics(replica=replica)
            if metrics is not None:
                observed.metrics[replica.pk] = metrics
        return
    failures = replica.failures + 1
    if failures < settings.TORUS_SERVING_HEALTH_FAILURES:
        Replica.objects.filter(pk=replica.pk).update(failures=failures)
        return
    with transaction.atomic():
        locked = Replica.objects.select_for_update().get(pk=replica.pk)
        if locked.state != ReplicaState.READY:
            return
        locked.deployment = replica.deployment
        locked.failures = failures
        replica_mark_unhealthy(
            replica=locked, reason=f"/health failed {failures} times in a row; replaced"
        )
        replicas.replica_cancel(replica=locked)


# -- the deployment -----------------------------------------------------------------------------


def converge(*, deployment_id, observed: Observed) -> None:
    with transaction.atomic():
        deployment = (
            Deployment.objects.select_for_update(of=("self",))
            .select_related("version", "model", "project", "created_by")
            .filter(pk=deployment_id)
            .first()
        )
        if deployment is None or deployment.state == DeploymentState.STOPPED:
            return
        before = (deployment.state, deployment.state_reason, deployment.replicas_desired)
        _follow_alias(deployment)
        rows = list(deployment.replicas.exclude(state=ReplicaState.STOPPED).select_related("job"))
        for row in rows:
            row.deployment = deployment
        current = [
            r for r in rows if r.version_id == deployment.version_id and r.state in REPLICA_LIVE
        ]
        old = [r for r in rows if r.version_id != deployment.version_id]
        updating = bool(old) or deployment.state == DeploymentState.UPDATING
        if not updating and deployment.state != DeploymentState.FAILED:
            autoscale.scale_to_zero(deployment=deployment, current=current)
            autoscale.autoscale(deployment=deployment, current=current, observed=observed.metrics)
        if deployment.state != DeploymentState.FAILED:
            current = _scale(deployment=deployment, current=current)
        if old:
            _drain_old(deployment=deployment, current=current, old=old)
        _set_state(deployment=deployment, current=current, old=old, before=before)


def _follow_alias(deployment: Deployment) -> None:
    from apps.registry.models import VersionState

    target = selectors.alias_version(deployment=deployment)
    if target is None or target.pk == deployment.version_id:
        return
    if target.state != VersionState.READY or not replicas.model_file(target):
        return
    target.model = deployment.model
    try:
        fit_check(deployment=deployment, version=target)
    except ValidationError as exc:
        message = f"alias {deployment.follow_alias} moved to {target}: {exc.detail}"
        last = deployment.events.order_by("-created_at").values_list("message", flat=True)
        if last.first() != message:
            event_record(deployment=deployment, kind=EventKind.FAILED, message=message)
        return
    rollout_begin(
        deployment=deployment,
        version=target,
        why=f"alias {deployment.follow_alias} moved",
    )
    deployment.save(update_fields=["version", "state", "state_reason", "updated_at"])


def _scale(*, deployment: Deployment, current: list[Replica]) -> list[Replica]:
    """Start or drain replicas of the current version towards replicas_desired."""
    desired = deployment.replicas_desired
    if len(current) < desired:
        failures = selectors.start_failures(deployment=deployment)
        if len(failures) >= settings.TORUS_SERVING_MAX_START_FAILURES:
            _fail(
                deployment,
                f"{len(failures)} replicas in a row ended before they were ready; the last:"
                f" {failures[0].state_reason}",
            )
            return current
        for _ in range(desired - len(current)):
            try:
                replica = replicas.replica_start(
                    deployment=deployment, version=deployment.version, reason="started"
                )
            except Exception as exc:  # refused: a quota of the kind that refuses, a role lost
                _fail(deployment, f"a replica could not be submitted: {_reason(exc)}")
                return current
            replica.deployment = deployment
            current.append(replica)
            event_record(
                deployment=deployment,
                kind=EventKind.REPLICA_STARTED,
                message=f"replica {str(replica.pk)[:8]} submitted as job {replica.job_id}",
                data={"replica": str(replica.pk), "job": str(replica.job_id)},
            )
    elif len(current) > desired:
        # the newest first, not-yet-ready ones before ready ones
        extra = sorted(
            current, key=lambda r: (r.state == ReplicaState.READY, -r.created_at.timestamp())
        )[: len(current) - desired]
        for replica in extra:
            _drain(replica)
        current = [r for r in current if r not in extra]
    return current


def _drain(replica: Replica) -> None:
    """Out of the route table now; its job is cancelled once nothing is in flight on it."""
    if replica.state == ReplicaState.STARTING:
        if _move(replica, to=ReplicaState.DRAINING, reason="not needed"):
            replicas.replica_cancel(replica=replica)
    elif replica.state == ReplicaState.READY:
        _move(replica, to=ReplicaState.DRAINING, reason="draining")


def _drain_old(*, deployment: Deployment, current: list[Replica], old: list[Replica]) -> None:
    """A rollout: the old version's replicas go once the new one has enough READY."""
    ready = sum(1 for r in current if r.state == ReplicaState.READY)
    for replica in old:
        enough = ready >= deployment.replicas_desired
        if replica.state == ReplicaState.STARTING or (
            replica.state == ReplicaState.READY and enough
        ):
            _drain(replica)


def _fail(deployment: Deployment, reason: str) -> None:
    deployment.state, deployment.state_reason = DeploymentState.FAILED, reason[:2000]
    deployment.save(update_fields=["state", "state_reason", "updated_at"])
    event_record(deployment=deployment, kind=EventKind.FAILED, message=reason)


def _reason(exc: Exception) -> str:
    detail = getattr(exc, "detail", None) or getattr(exc, "message_dict", None)
    return str(detail if detail is not None else exc)[:1000]


def _set_state(*, deployment: Deployment, current: list, old: list, before: tuple) -> None:
    ready = sum(1 for r in current if r.state == ReplicaState.READY)
    old_left = [r for r in old if r.state != ReplicaState.STOPPED]
    desired = deployment.replicas_desired
    if deployment.state == DeploymentState.FAILED:
        state, reason = DeploymentState.FAILED, deployment.state_reason
    elif deployment.state == DeploymentState.UPDATING and not old_left and ready >= desired:
        event_record(
            deployment=deployment,
            kind=EventKind.ROLLOUT_DONE,
            message=f"serving {deployment.version} on {ready} replica(s)",
            data={"version": deployment.version.number, "replicas": ready},
        )
        state, reason = DeploymentState.READY, ""
    elif deployment.state == DeploymentState.UPDATING or old_left:
        state, reason = DeploymentState.UPDATING, f"rolling to {deployment.version}"
    elif desired == 0:
        state, reason = DeploymentState.IDLE, "no replicas; a request wakes it"
    elif ready >= desired:
        state, reason = DeploymentState.READY, ""
    elif ready:
        state, reason = DeploymentState.DEGRADED, f"{ready} of {desired} replicas ready"
    else:
        state, reason = DeploymentState.STARTING, _waiting_reason(current)
    deployment.state, deployment.state_reason = state, reason
    if (state, reason, desired) != before:
        deployment.save(update_fields=["state", "state_reason", "replicas_desired", "updated_at"])
        routes.publish_on_commit(deployment_id=deployment.pk)
        _health_told(deployment=deployment, before=before[0])


SERVING = (DeploymentState.READY, DeploymentState.UPDATING)


def _health_told(*, deployment: Deployment, before: str) -> None:
    """A deployment that was serving and no longer is (fewer replicas ready than asked for)
    gets a `failing` event, once; FAILED is told by its `failed` event; READY again after
    either, a `recovered` event. Each goes to the listeners (notifications) after the
    commit."""
    state = deployment.state
    last = (
        deployment.events.filter(
            kind__in=[EventKind.FAILED, EventKind.FAILING, EventKind.RECOVERED]
        )
        .order_by("-created_at")
        .first()
    )
    told = last is not None and last.kind != EventKind.RECOVERED
    reason = deployment.state_reason or state.lower()
    if state == DeploymentState.FAILED and last is not None and last.kind == EventKind.FAILED:
        kind, event = EventKind.FAILING, last  # _fail recorded it in this pass
    elif before in SERVING and state in (DeploymentState.DEGRADED, DeploymentState.STARTING):
        if told:
            return
        kind = EventKind.FAILING
        event = event_record(deployment=deployment, kind=kind, message=reason)
    elif state == DeploymentState.READY and told:
        kind = EventKind.RECOVERED
        event = event_record(deployment=deployment, kind=kind, message="serving again")
    else:
        return
    transaction.on_commit(
        lambda: listeners.health_changed(
            deployment_id=deployment.pk, kind=kind.value, event_id=event.pk, reason=reason
        )
    )


def _waiting_reason(current: list[Replica]) -> str:
    """Why no replica is ready yet: the first waiting job's reason (admission, a quota)."""
    for replica in current:
        job = replica.job
        if job is not None and job.state == State.PENDING and job.state_reason:
            return f"waiting: {job.state_reason}"
    return "replicas starting"
