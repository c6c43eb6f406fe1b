"""Subscriptions: made and removed by the person they belong to, each field checked."""

import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from apps.core.actor import Actor
from apps.notifications.models import Channel, Event, NotificationDefault, Subscription
from apps.registry.webhooks import UrlRefused, resolve
from apps.tenancy.audit import audit_record


def address_problem(*, channel: str, address: str, allow_http: bool) -> str | None:
    """Why this address cannot take this channel's messages, or None."""
    if channel == Channel.INAPP:
        return "An in-app subscription takes no address." if address else None
    if channel == Channel.EMAIL:
        try:
            validate_email(address)
        except ValidationError:
            return "Not a valid e-mail address."
        return None
    if not address.startswith("https://") and not (allow_http and address.startswith("http://")):
        return "Only https URLs are allowed."
    try:
        resolve(address)  # public addresses only, unless the operator allows private ones
    except UrlRefused as exc:
        return str(exc)
    return None


def _events_check(events: list[str]) -> None:
    unknown = sorted(set(events) - set(Event.values))
    if unknown or not events:
        message = f"Unknown events: {', '.join(unknown)}." if unknown else "Name an event."
        raise ValidationError({"events": [message]})


def subscription_create(
    *,
    actor: Actor,
    tenant,
    events: list[str],
    channel: str,
    address: str,
    project=None,
    job=None,
) -> tuple[Subscription, str]:
    """A subscription of the actor's; returns it and, for a signed webhook, its signing secret
    (shown once: the API never returns it again). An unknown event or channel, or an address
    the channel cannot take: ValidationError naming the field, nothing written."""
    _events_check(events)
    if channel not in Channel.values:
        raise ValidationError({"channel": [f"Unknown channel {channel!r}."]})
    problem = address_problem(
        channel=channel, address=address, allow_http=settings.TORUS_WEBHOOK_ALLOW_PRIVATE
    )
    if problem:
        raise ValidationError({"address": [problem]})
    secret = secrets.token_urlsafe(32) if channel == Channel.WEBHOOK else ""
    subscription = Subscription.objects.create(
        tenant=tenant,
        user=actor.user,
        project=project,
        job=job,
        events=sorted(set(events)),
        channel=channel,
        address=address,
        secret=secret,
    )
    audit_record(
        actor=actor,
        tenant_id=tenant.pk,
        action="subscription.create",
        target=subscription,
        changes={"channel": channel, "events": subscription.events},
    )
    return subscription, secret


def subscription_delete(*, actor: Actor, subscription: Subscription) -> None:
    audit_record(
        actor=actor,
        tenant_id=subscription.tenant_id,
        action="subscription.delete",
        target=subscription,
        changes={"channel": subscription.channel},
    )
    subscription.delete()


def notification_default_set(*, actor: Actor, tenant, channel: str, events: list[str]):
    """The tenant's default for `channel` (email or inapp): made, or its events replaced.
    Members without their own subscriptions get it at their jobs' next event."""
    if channel not in (Channel.EMAIL, Channel.INAPP):
        raise ValidationError({"channel": ["A default is sent by email or to the bell (inapp)."]})
    _events_check(events)
    row, made = NotificationDefault.objects.update_or_create(
        tenant=tenant, channel=channel, defaults={"events": sorted(set(events))}
    )
    audit_record(
        actor=actor,
        tenant_id=tenant.pk,
        action="notification_default.create" if made else "notification_default.update",
        target=row,
        changes={"channel": channel, "events": row.events},
    )
    return row


def notification_default_delete(*, actor: Actor, default) -> None:
    """The default and the subscriptions made from it go."""
    audit_record(
        actor=actor,
        tenant_id=default.tenant_id,
        action="notification_default.delete",
        target=default,
        changes={"channel": default.channel},
    )
    default.delete()
