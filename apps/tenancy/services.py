"""Writes for tenancy: tenants, memberships, projects and their members, access tokens.
Each service runs in a transaction and records an audit event. Invitations: invitations.py."""

import logging
import secrets
from collections.abc import Callable
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.tenancy.audit import audit_record, diff, snapshot
from apps.tenancy.live import publish_access_changed
from apps.tenancy.models import (
    AccessToken,
    Membership,
    Project,
    ProjectMember,
    Role,
    Tenant,
    hash_token,
)

TOKEN_PREFIX = "tor_"
User = get_user_model()
logger = logging.getLogger(__name__)
# What a person leaving a tenant or a project leaves besides (identity: the cluster's groups),
# registered from that app's AppConfig.ready(); called inside the removal's transaction.
_MEMBER_REMOVED: list[Callable[..., None]] = []


def member_removed_register(callback: Callable[..., None]) -> None:
    """Register callback(tenant=, user=, project=None), run when a person leaves."""
    _MEMBER_REMOVED.append(callback)


def _member_removed(*, tenant: Tenant, user, project: Project | None = None) -> None:
    for callback in _MEMBER_REMOVED:
        callback(tenant=tenant, user=user, project=project)


@transaction.atomic
def tenant_create(*, name: str, slug: str, owner, description: str = "") -> Tenant:
    """Create a tenant with its first owner (operators and seed_demo use this)."""
    tenant = Tenant.objects.create(name=name, slug=slug, description=description)
    Membership.objects.create(tenant=tenant, user=owner, role=Role.OWNER)
    audit_record(actor=None, user=owner, tenant_id=tenant.id, action="tenant.create", target=tenant)
    return tenant


def _update(*, actor: Actor, instance, fields: dict, action: str, ip: str | None):
    before = snapshot(instance, list(fields))
    for name, value in fields.items():
        setattr(instance, name, value)
    changes = diff(before, snapshot(instance, list(fields)))
    if changes:
        instance.full_clean()
        instance.save()
        audit_record(
            actor=actor,
            tenant_id=instance.tenant_id_value,
            action=action,
            target=instance,
            changes=changes,
            ip=ip,
        )
    return instance


@transaction.atomic
def tenant_update(*, actor: Actor, tenant: Tenant, fields: dict, ip: str | None = None) -> Tenant:
    return _update(actor=actor, instance=tenant, fields=fields, action="tenant.update", ip=ip)


def _owner_count(tenant_id) -> int:
    return Membership.objects.filter(tenant_id=tenant_id, role=Role.OWNER).count()


def guard_owner_change(*, actor: Actor, tenant_id, old_role: str | None, new_role: str | None):
    """Only an owner grants or changes the owner role, and a tenant keeps at least one owner."""
    touches_owner = Role.OWNER in (old_role, new_role)
    if touches_owner and actor.role_in(tenant_id) != Role.OWNER:
        raise PermissionDenied("Only an owner can grant or change the owner role.")
    if old_role == Role.OWNER and new_role != Role.OWNER and _owner_count(tenant_id) <= 1:
        raise Conflict("A tenant must keep at least one owner.")


@transaction.atomic
def membership_update(
    *, actor: Actor, membership: Membership, role: str, ip: str | None = None
) -> Membership:
    Tenant.objects.select_for_update().get(pk=membership.tenant_id)  # serialise owner changes
    membership = Membership.objects.get(pk=membership.pk)
    guard_owner_change(
        actor=actor, tenant_id=membership.tenant_id, old_role=membership.role, new_role=role
    )
    publish_access_changed(user_ids=[membership.user_id])  # open websockets re-check
    return _update(
        actor=actor, instance=membership, fields={"role": role}, action="membership.update", ip=ip
    )


@transaction.atomic
def membership_delete(*, actor: Actor, membership: Membership, ip: str | None = None) -> None:
    Tenant.objects.select_for_update().get(pk=membership.tenant_id)  # serialise owner changes
    membership = Membership.objects.get(pk=membership.pk)
    guard_owner_change(
        actor=actor, tenant_id=membership.tenant_id, old_role=membership.role, new_role=None
    )
    audit_record(
        actor=actor,
        tenant_id=membership.tenant_id,
        action="membership.delete",
        target=membership,
        changes={"user": [membership.user.username, None], "role": [membership.role, None]},
        ip=ip,
    )
    ProjectMember.objects.filter(
        project__tenant_id=membership.tenant_id, user_id=membership.user_id
    ).delete()
    AccessToken.objects.filter(
        tenant_id=membership.tenant_id, user_id=membership.user_id, revoked_at__isnull=True
    ).update(revoked_at=timezone.now())
    publish_access_changed(user_ids=[membership.user_id])  # open websockets re-check
    _member_removed(tenant=membership.tenant, user=membership.user)  # the cluster's groups
    membership.delete()


@transaction.atomic
def project_create(
    *,
    actor: Actor,
    tenant: Tenant,
    name: str,
    slug: str,
    description: str = "",
    ip: str | None = None,
) -> Project:
    if Project.objects.filter(tenant=tenant, slug=slug).exists():
        raise Conflict(f"Project {slug!r} already exists in {tenant.slug}.")
    project = Project(tenant=tenant, name=name, slug=slug, description=description)
    project.full_clean()
    project.save()
    audit_record(
        actor=actor,
        tenant_id=tenant.id,
        action="project.create",
        target=project,
        changes={
            k: [None, v] for k, v in snapshot(project, ["name", "slug", "description"]).items()
        },
        ip=ip,
    )
    return project


@transaction.atomic
def project_update(
    *, actor: Actor, project: Project, fields: dict, ip: str | None = None
) -> Project:
    slug = fields.get("slug")
    if (
        slug
        and slug != project.slug
        and Project.objects.filter(tenant_id=project.tenant_id, slug=slug).exists()
    ):
        raise Conflict(f"Project {slug!r} already exists.")
    return _update(actor=actor, instance=project, fields=fields, action="project.update", ip=ip)


@transaction.atomic
def project_delete(*, actor: Actor, project: Project, ip: str | None = None) -> None:
    audit_record(
        actor=actor,
        tenant_id=project.tenant_id,
        action="project.delete",
        target=project,
        changes={"slug": [project.slug, None], "name": [project.name, None]},
        ip=ip,
    )
    project.delete()


@transaction.atomic
def project_member_add(
    *, actor: Actor, project: Project, user, ip: str | None = None
) -> ProjectMember:
    if not Membership.objects.filter(tenant_id=project.tenant_id, user=user).exists():
        raise ValidationError({"user": [f"{user.username} is not a member of this tenant."]})
    member, created = ProjectMember.objects.get_or_create(project=project, user=user)
    if not created:
        raise Conflict(f"{user.username} is already a member of {project.slug}.")
    audit_record(
        actor=actor,
        tenant_id=project.tenant_id,
        action="project_member.create",
        target=member,
        changes={"user": [None, user.username], "project": [None, project.slug]},
        ip=ip,
    )
    return member


@transaction.atomic
def project_member_remove(*, actor: Actor, member: ProjectMember, ip: str | None = None) -> None:
    audit_record(
        actor=actor,
        tenant_id=member.project.tenant_id,
        action="project_member.delete",
        target=member,
        changes={"user": [member.user.username, None], "project": [member.project.slug, None]},
        ip=ip,
    )
    _member_removed(tenant=member.project.tenant, user=member.user, project=member.project)
    member.delete()


@transaction.atomic
def token_create(
    *,
    actor: Actor | None,
    user,
    tenant: Tenant,
    name: str,
    read_only: bool = False,
    expires_at: datetime | None = None,
    ip: str | None = None,
) -> tuple[AccessToken, str]:
    """Mint a token; the plaintext is returned once and never stored."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": ["Must be in the future."]})
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = AccessToken.objects.create(
        user=user,
        tenant=tenant,
        name=name,
        prefix=plaintext[: len(TOKEN_PREFIX) + 6],
        token_hash=hash_token(plaintext),
        read_only=read_only,
        expires_at=expires_at,
    )
    audit_record(
        actor=actor,
        user=None if actor else user,
        tenant_id=tenant.id,
        action="token.create",
        target=token,
        changes={"name": [None, name], "read_only": [None, read_only]},
        ip=ip,
    )
    return token, plaintext


@transaction.atomic
def token_revoke(*, actor: Actor, token: AccessToken, ip: str | None = None) -> AccessToken:
    token = AccessToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at", "updated_at"])
        audit_record(
            actor=actor, tenant_id=token.tenant_id, action="token.revoke", target=token, ip=ip
        )
        publish_access_changed(token_ids=[token.pk])  # its open websockets close
    return token


def token_record_use(*, token: AccessToken, ip: str | None, now: datetime) -> None:
    """Record a token's use (callers rate-limit this to once per interval)."""
    AccessToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_ip=ip)
    token.last_used_at, token.last_used_ip = now, ip
    audit_record(
        actor=None,
        user=token.user,
        tenant_id=token.tenant_id,
        action="token.use",
        target=token,
        ip=ip,
    )
