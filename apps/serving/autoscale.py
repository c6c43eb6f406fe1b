"""Scaling decisions, made by the reconciler under the deployment's row lock.

- autoscale(): from the engines' /metrics of the READY replicas (llamacpp:requests_processing
  and llamacpp:requests_deferred: requests being decoded and requests waiting for a slot), the
  replicas wanted are ceil(load / (slots x autoscale_target)) between replicas_min and
  replicas_max. Up at once; down only after the load has wanted fewer for
  TORUS_SERVING_SCALE_DOWN_AFTER_S (no flapping). Each decision is a DeploymentEvent with the
  figures it read.
- scale_to_zero(): no request for scale_to_zero_after_s (the gateway's last-request time in
  Redis, or the records' in the database) -> replicas_desired 0, state IDLE; services.wake()
  brings it back on the next request.
"""

import math
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from apps.serving import routes
from apps.serving.models import Deployment, EventKind, Replica, ReplicaState
from apps.serving.services import event_record

LOW_SINCE = "serving:low-since:{}"


def desired_for_load(*, load: float, slots: int, target: float, low: int, high: int) -> int:
    """Replicas for `load` requests (processing + waiting) at `target` requests per slot."""
    wanted = math.ceil(load / max(slots * target, 1e-9)) if load > 0 else 0
    return max(low, min(high, max(wanted, 1)))


def autoscale(*, deployment: Deployment, current: list[Replica], observed: dict) -> None:
    if deployment.replicas_max <= deployment.replicas_min or deployment.replicas_desired == 0:
        return
    ready = [r for r in current if r.state == ReplicaState.READY and r.pk in observed]
    if not ready:
        return
    processing = sum(observed[r.pk].get("processing", 0) for r in ready)
    deferred = sum(observed[r.pk].get("deferred", 0) for r in ready)
    load = processing + deferred
    wanted = desired_for_load(
        load=load,
        slots=deployment.slots,
        target=deployment.autoscale_target,
        low=max(deployment.replicas_min, 1),
        high=deployment.replicas_max,
    )
    have = deployment.replicas_desired
    key = LOW_SINCE.format(deployment.pk)
    if wanted >= have:
        cache.delete(key)
        if wanted == have:
            return
    else:
        now = timezone.now().timestamp()
        since = cache.get(key)
        if since is None:
            cache.set(key, now, timeout=3600)
            return
        if now - since < settings.TORUS_SERVING_SCALE_DOWN_AFTER_S:
            return
        cache.delete(key)
    figures = {
        "from": have,
        "to": wanted,
        "by": "autoscale",
        "requests_processing": processing,
        "requests_deferred": deferred,
        "ready_replicas": len(ready),
        "slots_per_replica": deployment.slots,
        "target_per_slot": deployment.autoscale_target,
        "per_replica": {str(r.pk): observed[r.pk] for r in ready},
    }
    deployment.replicas_desired = wanted
    event_record(
        deployment=deployment,
        kind=EventKind.SCALED_UP if wanted > have else EventKind.SCALED_DOWN,
        message=(
            f"{have} -> {wanted} replica(s): {processing:g} processing + {deferred:g} waiting"
            f" on {len(ready)} replica(s) of {deployment.slots} slots,"
            f" target {deployment.autoscale_target:g} per slot"
        ),
        data=figures,
    )


def last_activity(*, deployment: Deployment, current: list[Replica]):
    """The latest of: the last request (gateway, records), the newest replica ready, a wake."""
    times = [
        routes.last_request_at(deployment_id=deployment.pk),
        deployment.last_request_at,
        deployment.woken_at,
        deployment.created_at,
        *(r.ready_at for r in current),
    ]
    return max(t for t in times if t is not None)


def scale_to_zero(*, deployment: Deployment, current: list[Replica]) -> None:
    after = deployment.scale_to_zero_after_s
    if after is None or deployment.replicas_desired == 0:
        return
    if not any(r.state == ReplicaState.READY for r in current):
        return  # starting (or woken): not idle yet
    idle_since = last_activity(deployment=deployment, current=current)
    idle = timezone.now() - idle_since
    if idle < timedelta(seconds=after):
        return
    before = deployment.replicas_desired
    deployment.replicas_desired = 0
    event_record(
        deployment=deployment,
        kind=EventKind.SCALED_TO_ZERO,
        message=f"no request for {idle.total_seconds():.0f} s: {before} -> 0 replicas",
        data={"from": before, "to": 0, "idle_s": round(idle.total_seconds(), 1)},
    )
