"""A tenant's webhooks: created (with their signing secret, shown once), updated and deleted,
their URL and events checked."""

import secrets

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.actor import Actor
from apps.registry import webhooks
from apps.registry.models import Webhook, WebhookEvent
from apps.tenancy.audit import audit_record
from apps.tenancy.policies import authorize

# -- webhooks -----------------------------------------------------------------------------------


def _webhook_fields(*, url=None, events=None) -> dict:
    out = {}
    if url is not None:
        if len(url) > 2000:
            raise ValidationError({"url": ["At most 2000 characters."]})
        try:
            webhooks.resolve(url)
        except webhooks.UrlRefused as exc:
            raise ValidationError({"url": [str(exc)]}) from None
        out["url"] = url
    if events is not None:
        if not isinstance(events, list) or not events:
            raise ValidationError({"events": ["Name at least one event."]})
        unknown = sorted(set(events) - set(WebhookEvent.values))
        if unknown:
            raise ValidationError(
                {
                    "events": [
                        f"Unknown: {', '.join(unknown)}; one of {', '.join(WebhookEvent.values)}."
                    ]
                }
            )
        out["events"] = sorted(set(events))
    return out


def webhook_create(
    *, actor: Actor, tenant, url: str, events: list[str], description: str = ""
) -> tuple[Webhook, str]:
    """A webhook and its signing secret (returned here only: shown once)."""
    authorize(actor, resource="webhook", action="create", tenant_id=tenant.pk)
    fields = _webhook_fields(url=url, events=events)
    secret = "whsec_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        hook = Webhook.objects.create(
            tenant=tenant,
            secret=secret,
            description=description[:200],
            created_by=actor.user,
            **fields,
        )
        audit_record(
            actor=actor,
            tenant_id=tenant.pk,
            action="webhook.create",
            target=hook,
            changes={"url": url, "events": fields["events"]},
        )
    return hook, secret


def webhook_update(*, actor: Actor, webhook: Webhook, **fields) -> Webhook:
    authorize(actor, resource="webhook", action="update", tenant_id=webhook.tenant_id)
    values = _webhook_fields(url=fields.get("url"), events=fields.get("events"))
    if "active" in fields:
        values["active"] = bool(fields["active"])
    if "description" in fields:
        values["description"] = str(fields["description"])[:200]
    changes = {k: [getattr(webhook, k), v] for k, v in values.items() if getattr(webhook, k) != v}
    with transaction.atomic():
        for key, value in values.items():
            setattr(webhook, key, value)
        webhook.save()
        audit_record(
            actor=actor,
            tenant_id=webhook.tenant_id,
            action="webhook.update",
            target=webhook,
            changes=changes,
        )
    return webhook


def webhook_delete(*, actor: Actor, webhook: Webhook) -> None:
    authorize(actor, resource="webhook", action="delete", tenant_id=webhook.tenant_id)
    with transaction.atomic():
        audit_record(
            actor=actor, tenant_id=webhook.tenant_id, action="webhook.delete", target=webhook
        )
        webhook.delete()
