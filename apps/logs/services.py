"""Writes for logs: failure signatures (audited)."""

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.logs.models import FailureSignature
from apps.tenancy.audit import audit_record, diff, snapshot


def _check_query(query: str) -> None:
    if not query.strip() or "\x00" in query:
        raise ValidationError({"query": ['Give a search such as "CUDA out of memory".']})


@transaction.atomic
def signature_create(
    *, actor: Actor, tenant, name: str, query: str, ip: str | None = None
) -> FailureSignature:
    _check_query(query)
    try:
        with transaction.atomic():
            signature = FailureSignature.objects.create(tenant=tenant, name=name, query=query)
    except IntegrityError as exc:
        raise Conflict(f"A signature named {name!r} exists already.") from exc
    audit_record(
        actor=actor,
        tenant_id=tenant.id,
        action="failure_signature.create",
        target=signature,
        changes=diff({}, snapshot(signature, ["name", "query"])),
        ip=ip,
    )
    return signature


@transaction.atomic
def signature_update(
    *, actor: Actor, signature: FailureSignature, fields: dict, ip: str | None = None
) -> FailureSignature:
    if "query" in fields:
        _check_query(fields["query"])
    before = snapshot(signature, ["name", "query"])
    for key, value in fields.items():
        setattr(signature, key, value)
    try:
        with transaction.atomic():
            signature.save()
    except IntegrityError as exc:
        raise Conflict("Another signature has that name.") from exc
    audit_record(
        actor=actor,
        tenant_id=signature.tenant_id,
        action="failure_signature.update",
        target=signature,
        changes=diff(before, snapshot(signature, ["name", "query"])),
        ip=ip,
    )
    return signature


@transaction.atomic
def signature_delete(*, actor: Actor, signature: FailureSignature, ip: str | None = None):
    audit_record(
        actor=actor,
        tenant_id=signature.tenant_id,
        action="failure_signature.delete",
        target=signature,
        changes={"name": [signature.name, None]},
        ip=ip,
    )
    signature.delete()
