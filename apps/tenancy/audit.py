"""Writing the audit log. Services call audit_record() inside their transaction."""

import json
from typing import Any

from django.db import models

from apps.core.actor import Actor
from apps.core.jsonsafe import MAX_TEXT, renderable
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


MAX_CHANGES_BYTES = 16 * 1024


def storable(changes: dict | None) -> dict:
    """`changes` as the log keeps them: JSON that renders (no integer beyond 64 bits, no NaN
    or infinity: apps/core/jsonsafe.py), at most MAX_CHANGES_BYTES; an entry that does not
    fit is kept as the start of its text."""
    safe = renderable(changes or {})
    if len(json.dumps(safe, ensure_ascii=False).encode()) <= MAX_CHANGES_BYTES:
        return safe
    share = max(64, min(MAX_TEXT, MAX_CHANGES_BYTES // (4 * max(len(safe), 1))))
    cut = {}
    for key, value in list(safe.items())[:64]:
        text = json.dumps(value, ensure_ascii=False)
        cut[key[:64]] = value if len(text) <= share else text[:share] + "…"
    return cut


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
        changes=storable(changes),
        ip=ip,
    )
