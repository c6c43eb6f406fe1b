"""Reads of the registry: versions compared, alias history, a version's reference. Every
function takes the actor and sees only its tenants (apps/core/models.py::visible_to). Lineage,
which reads jobs' attempts: apps/jobs/lineage.py, served through apps/registry/lineage.py."""

from django.http import Http404

from apps.core.actor import Actor
from apps.registry.models import ModelVersion, RegisteredModel
from apps.tenancy.models import AuditEvent


def model_visible(actor: Actor, model: RegisteredModel) -> None:
    """Scoping without a query: the row's tenant among the actor's (a 404 otherwise)."""
    if model.tenant_id not in actor.tenant_ids:
        raise Http404("Model not found.")


def version_ref(version: ModelVersion) -> dict:
    return {
        "id": str(version.pk),
        "model": {"id": str(version.model_id), "name": version.model.name},
        "number": version.number,
        "ref": f"{version.model.name}:{version.number}",
        "state": version.state,
        "stage": version.stage,
    }


def versions_compare(*, actor: Actor, a: ModelVersion, b: ModelVersion) -> dict:
    """Metrics side by side (with b - a) and parameters (with whether they differ)."""
    for version in (a, b):
        model_visible(actor, version.model)
    metrics = {}
    for name in sorted(set(a.metrics) | set(b.metrics)):
        left, right = a.metrics.get(name), b.metrics.get(name)
        delta = right - left if left is not None and right is not None else None
        metrics[name] = {"a": left, "b": right, "delta": delta}
    params = {}
    for name in sorted(set(a.params) | set(b.params)):
        left, right = a.params.get(name), b.params.get(name)
        params[name] = {"a": left, "b": right, "changed": left != right}
    return {"a": version_ref(a), "b": version_ref(b), "metrics": metrics, "params": params}


def alias_history(*, actor: Actor, model: RegisteredModel) -> list[dict]:
    """Every move of the model's aliases, oldest first, from the audit log."""
    model_visible(actor, model)
    events = AuditEvent.objects.filter(
        tenant_id=model.tenant_id,
        action="model.alias",
        target_type="registeredmodel",
        target_id=str(model.pk),
    ).order_by("created_at")
    return [
        {
            "alias": event.changes.get("alias"),
            "from_version": event.changes.get("version", [None, None])[0],
            "to_version": event.changes.get("version", [None, None])[1],
            "actor": event.actor_repr,
            "at": event.created_at,
        }
        for event in events
    ]
