"""Webhook deliveries: the events' payloads, one delivery per webhook that wants an event,
each try (with backoff) and the overdue ones the sweep sends again. Tasks are sent by name:
this module never imports apps/registry/tasks.py."""

import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from apps.registry import webhooks
from apps.registry.models import (
    DeliveryState,
    ModelVersion,
    RegisteredModel,
    Webhook,
    WebhookDelivery,
)


def model_ref(model: RegisteredModel) -> dict:
    return {
        "tenant": model.project.tenant.slug,
        "project": model.project.slug,
        "model": {"id": str(model.pk), "name": model.name},
    }


def version_event(version: ModelVersion) -> dict:
    return {
        **model_ref(version.model),
        "version": {
            "id": str(version.pk),
            "number": version.number,
            "framework": version.framework,
            "metrics": version.metrics,
            "files": version.file_count,
            "bytes": version.size_bytes,
            "manifest_sha256": version.manifest_sha256,
            "source_job": str(version.source_job_id) if version.source_job_id else None,
        },
    }


def with_webhook_flag(models):
    """`models` (a queryset) each with `tenant_has_webhooks`, read in the same query: an
    event about a model whose tenant has no active webhook then costs no query."""
    hooks = Webhook.objects.filter(tenant_id=OuterRef("tenant_id"), active=True)
    return models.annotate(tenant_has_webhooks=Exists(hooks))


def deliveries_enqueue(
    *, tenant_id, event: str, payload, model: RegisteredModel | None = None
) -> list[WebhookDelivery]:
    """One delivery per active webhook of the tenant that wants `event`, in the caller's
    transaction; each is tried by the worker after commit. `payload`: a dict, or a function
    making it (called only when a webhook wants the event). `model`: the model the event is
    about, if read `with_webhook_flag` (then none are looked for when the tenant had none)."""
    if model is not None and getattr(model, "tenant_has_webhooks", True) is False:
        return []
    hooks = [
        hook
        for hook in Webhook.objects.filter(tenant_id=tenant_id, active=True)
        if event in hook.events
    ]
    if not hooks:
        return []
    now = timezone.now()
    payload = payload() if callable(payload) else payload
    deliveries = WebhookDelivery.objects.bulk_create(
        [
            WebhookDelivery(
                webhook=hook,
                event=event,
                payload={"event": event, "sent_for": now.isoformat(), **payload},
                next_attempt_at=now,
            )
            for hook in hooks
        ]
    )
    ids = [str(d.pk) for d in deliveries]

    def send():
        from celery import current_app

        for pk in ids:  # sent by name: services never import tasks
            current_app.send_task("registry.deliver_webhook", args=[pk])

    transaction.on_commit(send)
    return deliveries


def backoff_seconds(attempts: int) -> float:
    """Before try `attempts + 1`: base * 2^(attempts-1), with up to 10 % jitter."""
    base = settings.TORUS_WEBHOOK_BACKOFF_SECONDS * (2 ** max(attempts - 1, 0))
    return base + base * 0.1 * secrets.randbelow(1000) / 1000


def delivery_try(*, delivery_id) -> tuple[WebhookDelivery | None, float | None]:
    """One try of a pending delivery that is due. Returns the delivery and, when another try
    is to follow, the seconds to wait. The claim (attempts + a lease as next_attempt_at) is
    committed before the request, so two workers never send the same try."""
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .select_related("webhook")
            .filter(pk=delivery_id, state=DeliveryState.PENDING)
            .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
            .first()
        )
        if delivery is None:
            return None, None
        delivery.attempts += 1
        lease = settings.TORUS_WEBHOOK_TIMEOUT_SECONDS * 3
        delivery.next_attempt_at = now + timedelta(seconds=lease)
        delivery.save(update_fields=["attempts", "next_attempt_at", "updated_at"])
    hook = delivery.webhook
    if not hook.active:
        result = webhooks.TryResult(ok=False, error="The webhook was deactivated.", permanent=True)
    else:
        result = webhooks.deliver_once(
            url=hook.url,
            secret=hook.secret,
            event=delivery.event,
            delivery_id=str(delivery.pk),
            payload=delivery.payload,
        )
    delivery.response_code = result.status
    delivery.error = result.error
    wait = None
    if result.ok:
        delivery.state, delivery.delivered_at, delivery.next_attempt_at = (
            DeliveryState.SUCCEEDED,
            timezone.now(),
            None,
        )
    elif result.permanent or delivery.attempts >= settings.TORUS_WEBHOOK_MAX_ATTEMPTS:
        delivery.state, delivery.next_attempt_at = DeliveryState.FAILED, None
    else:
        wait = backoff_seconds(delivery.attempts)
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=wait)
    delivery.save(
        update_fields=[
            "state",
            "response_code",
            "error",
            "delivered_at",
            "next_attempt_at",
            "updated_at",
        ]
    )
    return delivery, wait


def deliveries_overdue(*, grace_seconds: int = 30) -> list[str]:
    """Pending deliveries whose try is overdue (a lost message, a worker restart)."""
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    return [
        str(pk)
        for pk in WebhookDelivery.objects.filter(
            state=DeliveryState.PENDING, next_attempt_at__lte=cutoff
        ).values_list("pk", flat=True)[:1000]
    ]
