"""Writing the audit log. Services call audit_record() inside their transaction."""

from typing import Any

from django.db import models

from apps.core.actor import Actor
from apps.tenancy.models import AuditEvent


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, models.Model):
        return str(value.pk)
    return str(value)


def snapshot(instance: models.Model, fields: list[str]) -> dict[str, Any]:
    return {name: _plain(getattr(instance, name)) for name in fields}


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """{field: [old, new]} for each field that changed."""
    return {k: [before.get(k), after.get(k)] for k in after if before.get(k) != after.get(k)}


def audit_record(**kwargs) -> AuditEvent:
    """Write one audit event (see audit_event for the arguments)."""
    event = audit_event(**kwargs)
    event.save()
    return event


def audit_event(
    *,
    actor: Actor | None,
    tenant_id,
    action: str,
    target: models.Model | None = None,
    changes: dict | None = None,
    ip: str | None = None,
    user=None,
) -> AuditEvent:
    """An unsaved audit event, for callers that write many at once (bulk_create)."""
    user = user if user is not None else (actor.user if actor else None)
    return AuditEvent(
        tenant_id=tenant_id,
        actor=user if getattr(user, "pk", None) else None,
        actor_repr=getattr(user, "username", "") or "",
        token=actor.token if actor else None,
        action=action,
        target_type=target._meta.model_name if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        target_repr=str(target)[:200] if target is not None else "",
        changes=changes or {},
        ip=ip,
    )
