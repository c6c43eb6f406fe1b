"""Invitations into a tenant: create (the link mailed, its token shown once), accept, revoke.
Each runs in a transaction and records an audit event."""

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
from apps.tenancy.audit import audit_record
from apps.tenancy.models import Invitation, Membership, Role, Tenant, hash_token
from apps.tenancy.services import guard_owner_change

INVITATION_PREFIX = "tinv_"
User = get_user_model()
logger = logging.getLogger(__name__)


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
    guard_owner_change(actor=actor, tenant_id=tenant.id, old_role=None, new_role=role)
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
