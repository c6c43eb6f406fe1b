"""Celery tasks of notifications (the worker, as torus): one try per task, sent by name
(notifications.deliver); beat's sweep sends what is due (a message held for its minute or
its hour, a lost task, a retry whose wait is over)."""

from celery import shared_task

from apps.core.passes import Pass
from apps.notifications.delivery import notification_try, notifications_due

# One item per subscription (apps/core/passes.py): a channel whose tries fail is counted and
# logged once, cleared by its next message that goes through.
PASS = Pass("notifications")


@shared_task(name="notifications.deliver", acks_late=True)
def deliver(notification_id: str) -> str:
    try:
        notification, wait = notification_try(notification_id=notification_id)
    except Exception as exc:  # its lease runs out and the sweep sends it again
        PASS.failed(key=f"notification:{notification_id}", error=exc)
        return ""
    if notification is None:
        return ""
    PASS.succeeded(key=f"notification:{notification_id}")
    key = f"subscription:{notification.subscription_id}"
    if notification.state == "SENT":
        PASS.succeeded(key=key)
    else:
        PASS.failed(key=key, error=notification.error or "failed")
    if wait is not None:
        deliver.apply_async(args=[notification_id], countdown=wait)
    return notification.state


@shared_task(name="notifications.sweep")
def sweep() -> int:
    due = notifications_due()
    for pk in due:
        deliver.delay(pk)
    return len(due)
