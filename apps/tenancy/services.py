"""Writes for tenancy. Each service runs in a transaction and records an audit event."""

import logging
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.identity.services import member_remove
from apps.tenancy.audit import audit_record, diff, snapshot
from apps.tenancy.live import publish_access_changed
from apps.tenancy.models import (
    AccessToken,
    Invitation,
    Membership,
    Project,
    ProjectMember,
    Role,
    Tenant,
    hash_token,
)

TOKEN_PREFIX = "tor_"
INVITATION_PREFIX = "tinv_"
User = get_user_model()
logger = logging.getLogger(__name__)


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


def _guard_owner_change(*, actor: Actor, tenant_id, old_role: str | None, new_role: str | None):
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
    _guard_owner_change(
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
    _guard_owner_change(
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
    member_remove(tenant=membership.tenant, user=membership.user)  # and the cluster's groups
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
    member_remove(tenant=member.project.tenant, user=member.user, project=member.project)
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


def _invitation_pending(queryset, *, now: datetime):
    return queryset.filter(accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=now)


def invitation_accept_url() -> str:
    return settings.TORUS_PUBLIC_URL.rstrip("/") + "/api/v1/invitations/accept/"


@transaction.atomic
def invitation_create(
    *,
    actor: Actor,
    tenant: Tenant,
    role: str,
    email: str = "",
    username: str = "",
    ip: str | None = None,
) -> tuple[Invitation, str]:
    """Invite someone by e-mail or username; the token is returned once and never stored.

    Nobody is looked up: the answer is the same whether the person exists or not. Only this
    tenant's own members are checked (its admins see them anyway).
    """
    email, username = email.strip(), username.strip()
    if bool(email) == bool(username):
        raise ValidationError({"email": ["Give either an e-mail or a username (one of them)."]})
    if email:
        try:
            validate_email(email)
        except ValidationError as exc:
            raise ValidationError({"email": exc.messages}) from exc
    if role not in Role.values:
        raise ValidationError({"role": [f"{role!r} is not a role."]})
    _guard_owner_change(actor=actor, tenant_id=tenant.id, old_role=None, new_role=role)
    Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialise duplicate invitations
    now = timezone.now()
    members = Membership.objects.filter(tenant=tenant)
    invitations = _invitation_pending(Invitation.objects.filter(tenant=tenant), now=now)
    if email:
        already = members.filter(user__email__iexact=email).exists()
        pending = invitations.filter(email__iexact=email).exists()
    else:
        already = members.filter(user__username=username).exists()
        pending = invitations.filter(username=username).exists()
    invitee = email or username
    if already:
        raise Conflict(f"{invitee} is already a member of {tenant.slug}.")
    if pending:
        raise Conflict(f"{invitee} already has a pending invitation to {tenant.slug}.")
    plaintext = INVITATION_PREFIX + secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        tenant=tenant,
        email=email,
        username=username,
        role=role,
        invited_by=actor.user,
        token_hash=hash_token(plaintext),
        expires_at=now + timedelta(seconds=settings.TORUS_INVITATION_SECONDS),
    )
    audit_record(
        actor=actor,
        tenant_id=tenant.id,
        action="invitation.create",
        target=invitation,
        changes={"invitee": [None, invitee], "role": [None, role]},
        ip=ip,
    )
    if email:
        transaction.on_commit(lambda: _invitation_mail(invitation=invitation, token=plaintext))
    return invitation, plaintext


def _invitation_mail(*, invitation: Invitation, token: str) -> None:
    """Mail the invitation to its address through Django's e-mail backend (TORUS_EMAIL_*)."""
    tenant = invitation.tenant
    body = (
        f"You are invited to join {tenant.name} ({tenant.slug}) on Torus as {invitation.role}.\n\n"
        "Sign in to Torus with the account that has this e-mail address, then accept with"
        f" this token (single use,"
        f" valid until {invitation.expires_at:%Y-%m-%d %H:%M} UTC):\n\n    {token}\n\n"
        f'POST {{"token": "<token>"}} to {invitation_accept_url()}\n'
    )
    try:
        send_mail(
            subject=f"Invitation to {tenant.name} on Torus",
            message=body,
            from_email=None,
            recipient_list=[invitation.email],
        )
    except Exception:  # the invitation stands; the admin still has the link to pass on
        logger.warning("invitation %s: sending the e-mail failed", invitation.pk, exc_info=True)


@transaction.atomic
def invitation_accept(*, user, token: str, ip: str | None = None) -> Membership:
    """The invited person (signed in) accepts: only now do they become a member."""
    invitation = (
        Invitation.objects.select_for_update()
        .select_related("tenant")
        .filter(token_hash=hash_token(token.strip()))
        .first()
    )
    if invitation is None:
        raise ValidationError({"token": ["Unknown invitation token."]})
    status = invitation.status()
    if status != "pending":
        reason = {"accepted": "has already been used", "revoked": "was revoked"}
        raise ValidationError({"token": [f"This invitation {reason.get(status, 'has expired')}."]})
    if invitation.username:
        meant_for_user = user.username == invitation.username
    else:
        meant_for_user = bool(user.email) and user.email.lower() == invitation.email.lower()
    if not meant_for_user:
        raise PermissionDenied("This invitation is for someone else.")
    try:
        with transaction.atomic():
            membership = Membership.objects.create(
                tenant=invitation.tenant, user=user, role=invitation.role
            )
    except IntegrityError as exc:
        raise Conflict(f"You are already a member of {invitation.tenant.slug}.") from exc
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by", "updated_at"])
    audit_record(
        actor=None,
        user=user,
        tenant_id=invitation.tenant_id,
        action="invitation.accept",
        target=invitation,
        changes={"accepted_by": [None, user.username]},
        ip=ip,
    )
    audit_record(
        actor=None,
        user=user,
        tenant_id=invitation.tenant_id,
        action="membership.create",
        target=membership,
        changes={
            "user": [None, user.username],
            "role": [None, invitation.role],
            "invitation": [None, str(invitation.pk)],
        },
        ip=ip,
    )
    return membership


@transaction.atomic
def invitation_revoke(*, actor: Actor, invitation: Invitation, ip: str | None = None) -> Invitation:
    invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    if invitation.accepted_at is not None:
        raise Conflict("This invitation was accepted; remove the membership instead.")
    if invitation.revoked_at is None:
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at", "updated_at"])
        audit_record(
            actor=actor,
            tenant_id=invitation.tenant_id,
            action="invitation.revoke",
            target=invitation,
            ip=ip,
        )
    return invitation
