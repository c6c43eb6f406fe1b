"""One try of a notification that is due: e-mail through Django's SMTP backend, the other
channels through the registry's webhook sender (every address checked at each try, signed,
no redirects). A failed try is tried again with backoff for TORUS_NOTIFY_RETRY_HOURS, then the
notification fails and its subscription shows `failing_since` and the error to its owner; no
other notification waits for it. The claim (a lease in next_try_at) is committed before the
try, so two workers never send one try."""

from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core import telemetry
from apps.notifications import messages
from apps.notifications.models import Channel, Notification, NotificationState, Subscription
from apps.registry.deliveries import backoff_seconds
from apps.registry.webhooks import TryResult, deliver_once

LEASE = timedelta(minutes=2)
SENT_SECONDS = telemetry.histogram(
    "torus_notification_seconds",
    "From a message's first state change to its delivery (the minute's and the hour's waits"
    " included)",
    labels=("channel",),
)
FAILURES = telemetry.counter(
    "torus_notification_failures",
    "Tries of a message that failed (refused, unreachable, timed out), by channel",
    labels=("channel",),
)


def _send(notification: Notification) -> TryResult:
    subscription = notification.subscription
    if subscription.channel == Channel.INAPP:  # the bell had it when it was made
        return TryResult(ok=True)
    items = messages.enrich(notification)
    if subscription.channel == Channel.EMAIL:
        message = EmailMessage(
            subject=messages.subject(notification, items),
            body=messages.text(items),
            to=[subscription.address],
            headers={"X-Torus-Notification": notification.key},
        )
        try:
            message.send()
        except (OSError, ValueError) as exc:  # SMTP refused, unreachable, a bad header
            return TryResult(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        return TryResult(ok=True)
    return deliver_once(
        url=subscription.address,
        secret=subscription.secret or notification.key,
        event="job" if not notification.digest else "digest",
        delivery_id=notification.key,
        payload=messages.payload(subscription.channel, notification, items),
    )


def notification_try(*, notification_id) -> tuple[Notification | None, float | None]:
    """Send a due notification once. Returns it and, when another try is to follow, the
    seconds to wait."""
    now = timezone.now()
    with transaction.atomic():
        notification = (
            Notification.objects.select_for_update(skip_locked=True)
            .select_related("subscription")
            .filter(pk=notification_id, state=NotificationState.PENDING, not_before__lte=now)
            .filter(Q(next_try_at__isnull=True) | Q(next_try_at__lte=now))
            .first()
        )
        if notification is None:
            return None, None
        notification.tries += 1
        notification.next_try_at = now + LEASE
        notification.save(update_fields=["tries", "next_try_at", "updated_at"])
    result = _send(notification)
    wait = None
    now = timezone.now()
    give_up = notification.created_at + timedelta(hours=settings.TORUS_NOTIFY_RETRY_HOURS)
    channel = notification.subscription.channel
    if result.ok:
        notification.state, notification.sent_at, notification.next_try_at = (
            NotificationState.SENT,
            now,
            None,
        )
        first = datetime.fromisoformat(notification.items[0]["at"])
        telemetry.observe(SENT_SECONDS, (now - first).total_seconds(), channel=channel)
    else:
        telemetry.add(FAILURES, channel=channel)
        if result.permanent or now >= give_up:
            notification.state, notification.next_try_at = NotificationState.FAILED, None
        else:
            wait = backoff_seconds(notification.tries)
            notification.next_try_at = now + timedelta(seconds=wait)
    notification.error = result.error
    notification.save(update_fields=["state", "sent_at", "next_try_at", "error", "updated_at"])
    _subscription_health(notification.subscription, ok=result.ok, error=result.error, now=now)
    return notification, wait


def _subscription_health(subscription: Subscription, *, ok: bool, error: str, now) -> None:
    rows = Subscription.objects.filter(pk=subscription.pk)
    if ok:
        rows.exclude(failing_since=None).update(failing_since=None, last_error="")
    else:
        rows.filter(failing_since=None).update(failing_since=now)
        rows.update(last_error=error[:500])


def notifications_due(*, limit: int = 1000) -> list[str]:
    """Pending notifications whose wait is over and that no worker holds: the sweep's."""
    now = timezone.now()
    rows = Notification.objects.filter(state=NotificationState.PENDING, not_before__lte=now)
    rows = rows.filter(Q(next_try_at__isnull=True) | Q(next_try_at__lte=now))
    return [str(pk) for pk in rows.order_by("not_before").values_list("pk", flat=True)[:limit]]
