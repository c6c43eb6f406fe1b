"""Celery tasks of the registry (the worker, as torus). Each takes a primary key, reloads, checks
the state and calls a service; all are safe to run twice."""

from celery import shared_task

from apps.core.passes import Pass
from apps.registry.deliveries import deliveries_overdue, delivery_try
from apps.registry.models import DeliveryState
from apps.registry.trees import version_import

# Webhook deliveries' failures (apps/core/passes.py), one item per webhook: each delivery is its
# own task (one failing target never holds up another's); a target whose tries fail is counted
# and logged once, and cleared by its next delivered try. A delivery whose try raised keeps the
# lease it took (next_attempt_at) and is sent again by webhook_sweep once that is over.
PASS = Pass("webhooks")


@shared_task(name="registry.import_version", acks_late=True)
def import_version(version_id: str) -> str:
    version = version_import(version_id=version_id)
    return version.state if version else ""


@shared_task(name="registry.deliver_webhook", acks_late=True)
def deliver_webhook(delivery_id: str) -> str:
    try:
        delivery, wait = delivery_try(delivery_id=delivery_id)
    except Exception as exc:  # (the sweep sends it again once its lease is over)
        PASS.failed(key=f"delivery:{delivery_id}", error=exc)
        return ""
    if delivery is None:
        return ""
    PASS.succeeded(key=f"delivery:{delivery_id}")
    if delivery.state == DeliveryState.SUCCEEDED:
        PASS.succeeded(key=f"webhook:{delivery.webhook_id}")
    else:
        PASS.failed(key=f"webhook:{delivery.webhook_id}", error=delivery.error or "failed")
    if wait is not None:
        deliver_webhook.apply_async(args=[delivery_id], countdown=wait)
    return delivery.state


@shared_task(name="registry.webhook_sweep")
def webhook_sweep() -> int:
    """Beat's backstop: send again the deliveries whose try is overdue (Redis only delivers;
    the rows are the truth)."""
    overdue = deliveries_overdue()
    for pk in overdue:
        deliver_webhook.delay(pk)
    return len(overdue)
