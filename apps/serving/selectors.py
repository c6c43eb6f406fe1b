"""Reads of deployments shared by the API and the reconciler."""

from django.conf import settings
from django.db.models import QuerySet

from apps.serving.models import Deployment, Replica, ReplicaState

ACTIVE_REPLICAS = (
    ReplicaState.STARTING,
    ReplicaState.READY,
    ReplicaState.UNHEALTHY,
    ReplicaState.DRAINING,
)


def replicas_of(*, deployment: Deployment, include_stopped: bool = False) -> QuerySet:
    """A deployment's replicas, oldest first, with their version and job."""
    rows = deployment.replicas.select_related("version", "job").order_by("created_at")
    return rows if include_stopped else rows.filter(state__in=ACTIVE_REPLICAS)


def alias_version(*, deployment: Deployment):
    """The version the alias a deployment follows points at now (None: none, or no alias)."""
    from apps.registry.models import ModelAlias

    if not deployment.follow_alias:
        return None
    alias = (
        ModelAlias.objects.select_related("version")
        .filter(model_id=deployment.model_id, name=deployment.follow_alias)
        .first()
    )
    return alias.version if alias else None


def start_failures(*, deployment: Deployment) -> list[Replica]:
    """Replicas of the current version that ended by themselves before they were ever ready,
    since a replica last was ready (newest first, at most TORUS_SERVING_MAX_START_FAILURES):
    another version starts the count again."""
    last_ready = (
        deployment.replicas.exclude(ready_at=None).order_by("-ready_at").values("ready_at").first()
    )
    failed = deployment.replicas.filter(
        state=ReplicaState.STOPPED, failures__gt=0, version_id=deployment.version_id
    )
    if last_ready:
        failed = failed.filter(created_at__gt=last_ready["ready_at"])
    return list(failed.order_by("-created_at")[: settings.TORUS_SERVING_MAX_START_FAILURES])
