"""Reads of purges."""

import uuid

from apps.lifecycle.models import Purge, PurgeState


def purge_state(*, kind: str, pk, tenant_ids=None) -> str | None:
    """ "running" or "done" for a purge of that thing (in one of `tenant_ids`, when given)."""
    try:
        target_id = uuid.UUID(str(pk))
    except ValueError:
        return None
    rows = Purge.objects.filter(kind=kind, target_id=target_id)
    if tenant_ids is not None:
        rows = rows.filter(tenant_id_value__in=tenant_ids)
    state = rows.values_list("state", flat=True).first()
    return {PurgeState.RUNNING: "running", PurgeState.DONE: "done"}.get(state)
