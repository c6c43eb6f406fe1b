"""Reads for tenancy, always relative to the acting principal."""

import uuid

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from apps.core.actor import Actor
from apps.tenancy.models import Tenant

User = get_user_model()


def tenant_for_write(*, actor: Actor, ref: str | None) -> Tenant:
    """The tenant a create request targets: named by id or slug, or the actor's only tenant."""
    visible = Tenant.objects.visible_to(actor)
    if ref in (None, ""):
        if actor.token is not None:
            return visible.get(pk=actor.token.tenant_id)
        tenants = list(visible[:2])
        if len(tenants) == 1:
            return tenants[0]
        raise ValidationError({"tenant": ["Required: you belong to several tenants."]})
    try:
        lookup = {"pk": uuid.UUID(str(ref))}
    except ValueError:
        lookup = {"slug": ref}
    tenant = visible.filter(**lookup).first()
    if tenant is None:
        raise ValidationError({"tenant": [f"Tenant {ref!r} not found."]})
    return tenant


def member_by_username(*, tenant_id, username: str):
    """A member of the tenant. Anyone else, existing or not, gets the same answer."""
    user = User.objects.filter(
        username=username, is_active=True, memberships__tenant_id=tenant_id
    ).first()
    if user is None:
        raise ValidationError({"user": [f"{username!r} is not a member of this tenant."]})
    return user
