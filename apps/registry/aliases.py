"""A model's aliases (`production` -> a ready version): set, moved and deleted, audited and the
webhooks told."""

from contextlib import nullcontext

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.core.queries import unique_row
from apps.registry import alias_point
from apps.registry.deliveries import deliveries_enqueue, model_ref
from apps.registry.models import (
    ModelAlias,
    ModelVersion,
    RegisteredModel,
    VersionState,
    WebhookEvent,
)
from apps.registry.validation import valid_alias
from apps.tenancy.audit import audit_event, audit_record
from apps.tenancy.policies import authorize

# -- aliases and stages -------------------------------------------------------------------------


def alias_set(
    *, actor: Actor | None, model: RegisteredModel, name: str, version: ModelVersion, user=None
) -> ModelAlias:
    """Point `name` at `version` (a ready version of this model); the move is audited and
    the webhooks told."""
    if actor is not None:
        authorize(actor, resource="model", action="alias", tenant_id=model.tenant_id, target=model)
    valid_alias(name)
    if version.model_id != model.pk:
        raise ValidationError({"version": ["Not a version of this model."]})
    if version.state != VersionState.READY:
        raise ValidationError(
            {"version": [f"Version {version.number} is {version.state}, not ready."]}
        )
    tell = getattr(model, "tenant_has_webhooks", True)
    # without webhooks to tell, the one statement is the whole transaction
    with transaction.atomic() if tell else nullcontext():
        for _ in range(3):  # None: a concurrent call made it, or moved it to a new version
            audit = audit_event(
                actor=actor,
                user=user,
                tenant_id=model.tenant_id,
                action="model.alias",
                target=model,
                changes={"alias": name, "version": [None, version.number]},
            )
            if moved := alias_point.point(
                model_id=model.pk, name=name, version=version, audit=audit
            ):
                break
        else:
            raise Conflict("The alias kept changing; try again.")
        alias, before, changed = moved
        if changed and tell:
            _alias_tell(model=model, name=name, before=before, after=version.number)
    return alias


def alias_delete(*, actor: Actor, model: RegisteredModel, name: str) -> None:
    authorize(actor, resource="model", action="alias", tenant_id=model.tenant_id, target=model)
    with transaction.atomic():
        RegisteredModel.objects.select_for_update().get(pk=model.pk)
        alias = unique_row(
            ModelAlias.objects.filter(model=model, name=name).select_related("version")
        )
        if alias is None:
            raise ValidationError({"alias": [f"No alias {name!r} on this model."]})
        before = alias.version.number
        alias.delete()
        audit_record(
            actor=actor,
            tenant_id=model.tenant_id,
            action="model.alias",
            target=model,
            changes={"alias": name, "version": [before, None]},
        )
        _alias_tell(model=model, name=name, before=before, after=None)


def _alias_tell(*, model, name: str, before, after) -> None:
    deliveries_enqueue(
        tenant_id=model.tenant_id,
        model=model,
        event=WebhookEvent.ALIAS_CHANGED,
        payload=lambda: {
            **model_ref(model),
            "alias": name,
            "from_version": before,
            "to_version": after,
        },
    )
