"""The route table: where the gateway sends a deployment's requests, kept in Redis.

publish() reads a deployment, its READY replicas, its active keys and its project's members
from the database and writes them as one JSON value under `serving:route:<id>`, then sets a
new random generation under `serving:routegen:<id>`. The gateway keeps each route in its
process and reads only the generation per request (in the round trip it makes anyway), so a
request costs no SQL. A deployment that does not exist gets a short-lived tombstone.

Per replica, `serving:inflight:<replica id>` counts the requests the gateways have in flight
(INCR when sent, DECR when done, an expiry as a guard against a gateway that died holding
some); `serving:last:<deployment id>` is the time of the last request (scale to zero reads it).
"""

import json
import os
from datetime import UTC, datetime

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.db import transaction

ROUTE = "serving:route:{}"
GENERATION = "serving:routegen:{}"
INFLIGHT = "serving:inflight:{}"
LAST = "serving:last:{}"
INFLIGHT_TTL_S = 600  # a count nobody touched for this long is dropped
TOMBSTONE_TTL_S = 30


def redis_client():
    """The synchronous client of the cache's Redis database (the gateway's async client uses
    the same database: settings.CACHES["default"]["LOCATION"])."""
    return caches[DEFAULT_CACHE_ALIAS]._cache.get_client(write=True)


def redis_url() -> str:
    return settings.CACHES[DEFAULT_CACHE_ALIAS]["LOCATION"]


def build(*, deployment_id) -> dict:
    """The route of a deployment as the database has it now (a tombstone if there is none)."""
    from apps.serving.models import Deployment, DeploymentKey, Replica, ReplicaState
    from apps.tenancy.models import ProjectMember

    deployment = (
        Deployment.objects.select_related("model", "version").filter(pk=deployment_id).first()
    )
    if deployment is None:
        return {"id": str(deployment_id), "missing": True}
    replicas = Replica.objects.filter(
        deployment_id=deployment.pk, state=ReplicaState.READY, port__isnull=False
    ).exclude(host="")
    keys = DeploymentKey.objects.filter(deployment_id=deployment.pk, revoked_at__isnull=True)
    members = ProjectMember.objects.filter(project_id=deployment.project_id)
    version = deployment.version
    return {
        "id": str(deployment.pk),
        "name": deployment.name,
        "tenant_id": str(deployment.tenant_id),
        "project_id": str(deployment.project_id),
        "state": deployment.state,
        "state_reason": deployment.state_reason,  # a FAILED one's, answered by the gateway
        # names a request's "model" may give: the deployment's, the model's, a version's
        "models": sorted(
            {
                deployment.name,
                deployment.model.name,
                deployment.ref,
                f"{deployment.model.name}:{version.number}",
            }
        ),
        "created": int(deployment.created_at.timestamp()),
        "limits": {
            "tokens_per_minute": deployment.tokens_per_minute,
            "max_request_bytes": deployment.max_request_bytes,
            "max_tokens": deployment.max_tokens,
        },
        "replicas": [
            {"id": str(r.pk), "host": r.host, "port": r.port}
            for r in replicas.order_by("created_at")
        ],
        "keys": {h: str(k) for h, k in keys.values_list("token_hash", "id")},
        "members": sorted(str(u) for u in members.values_list("user_id", flat=True)),
    }


def publish(*, deployment_id) -> None:
    """Write the deployment's route and a new generation (callers inside a transaction use
    transaction.on_commit(lambda: publish(...)) so the gateway never sees uncommitted rows)."""
    route = build(deployment_id=deployment_id)
    ttl = TOMBSTONE_TTL_S if route.get("missing") else None
    with redis_client().pipeline(transaction=True) as pipe:
        pipe.set(ROUTE.format(deployment_id), json.dumps(route), ex=ttl)
        pipe.set(GENERATION.format(deployment_id), os.urandom(8).hex(), ex=ttl)
        pipe.execute()


def publish_on_commit(*, deployment_id) -> None:
    transaction.on_commit(lambda: publish(deployment_id=deployment_id))


def inflight(*, replica_id) -> int:
    """Requests the gateways have in flight on this replica now."""
    value = redis_client().get(INFLIGHT.format(replica_id))
    return max(0, int(value)) if value else 0


def last_request_at(*, deployment_id) -> datetime | None:
    """When the gateway last took a request for this deployment (None: none since Redis was
    last emptied; the database's Deployment.last_request_at trails it by the records' batch)."""
    value = redis_client().get(LAST.format(deployment_id))
    return datetime.fromtimestamp(float(value), tz=UTC) if value else None


def _on_project_member(sender, instance, **kwargs) -> None:
    from apps.serving.models import Deployment

    ids = list(
        Deployment.objects.filter(project_id=instance.project_id).values_list("pk", flat=True)
    )
    for deployment_id in ids:
        publish_on_commit(deployment_id=deployment_id)


def connect_signals() -> None:
    """Called from ServingConfig.ready: a project member added or removed republishes the
    routes of that project's deployments (their member lists)."""
    from django.db.models.signals import post_delete, post_save

    from apps.tenancy.models import ProjectMember

    for signal in (post_save, post_delete):
        signal.connect(_on_project_member, sender=ProjectMember, dispatch_uid="serving-routes-pm")
