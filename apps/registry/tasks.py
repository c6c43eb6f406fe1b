"""Celery tasks of the registry (the worker, as torus). Each takes a primary key, reloads, checks
the state and calls a service; all are safe to run twice."""

import logging

from celery import shared_task

from apps.core.passes import Pass
from apps.registry import services
from apps.registry.models import DeliveryState

logger = logging.getLogger(__name__)
# Webhook deliveries' failures (apps/core/passes.py), one item per webhook: each delivery is its
# own task (one failing target never holds up another's); a target whose tries fail is counted
# and logged once, and cleared by its next delivered try. A delivery whose try raised keeps the
# lease it took (next_attempt_at) and is sent again by webhook_sweep once that is over.
PASS = Pass("webhooks")

# A succeeded job's metrics come from its log lines: give the shipper this long to finish.
SHIPPED_WAIT_TRIES = 60
SHIPPED_WAIT_SECONDS = 2


@shared_task(name="registry.import_version", acks_late=True)
def import_version(version_id: str) -> str:
    version = services.version_import(version_id=version_id)
    return version.state if version else ""


@shared_task(name="registry.register_from_attempt", bind=True, acks_late=True, max_retries=None)
def register_from_attempt(self, attempt_id: str) -> str:
    """Sent by the reconciler when a job with `register_model` in its spec succeeds."""
    from apps.jobs.models import JobAttempt

    attempt = (
        JobAttempt.objects.select_related("job__project__tenant", "job__user")
        .filter(pk=attempt_id)
        .first()
    )
    if attempt is None:
        return ""
    if not attempt.logs_shipped and self.request.retries < SHIPPED_WAIT_TRIES:
        raise self.retry(countdown=SHIPPED_WAIT_SECONDS)
    version = services.version_register_from_attempt(attempt=attempt)
    if version is None:
        return ""
    logger.info("job %s registered %s (%s)", attempt.job_id, version, version.state)
    return str(version.pk)


@shared_task(name="registry.deliver_webhook", acks_late=True)
def deliver_webhook(delivery_id: str) -> str:
    try:
        delivery, wait = services.delivery_try(delivery_id=delivery_id)
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
    overdue = services.deliveries_overdue()
    for pk in overdue:
        deliver_webhook.delay(pk)
    return len(overdue)
