"""Writes for quotas: limits (with audit) and the usage ledger."""

from collections.abc import Callable

from django.db import IntegrityError, models, transaction

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.quotas.models import Quota, UsageRecord
from apps.tenancy.audit import audit_record, diff, snapshot

LIMITS = ["gpus", "cpus", "memory_mb", "running_jobs", "gpu_hours_per_month", "storage_bytes"]


def usage_record(*, attempt) -> UsageRecord | None:
    """Write the ledger line of an ended attempt (once; running it twice is harmless)."""
    if attempt.started_at is None or attempt.ended_at is None:
        return None
    job = attempt.job
    seconds = max(0.0, (attempt.ended_at - attempt.started_at).total_seconds())
    attempt.gpu_seconds, attempt.cpu_seconds = seconds * job.gpus, seconds * job.cpus
    attempt.save(update_fields=["gpu_seconds", "cpu_seconds"])
    record, _ = UsageRecord.objects.get_or_create(
        attempt=attempt,
        defaults={
            "tenant_id": job.tenant_id,
            "project_id": job.project_id,
            "user_id": job.user_id,
            "job": job,
            "started_at": attempt.started_at,
            "ended_at": attempt.ended_at,
            "gpus": job.gpus,
            "cpus": job.cpus,
            "gpu_seconds": attempt.gpu_seconds,
            "cpu_seconds": attempt.cpu_seconds,
        },
    )
    return record


@transaction.atomic
def quota_create(
    *, actor: Actor, tenant, project=None, user=None, limits: dict, ip: str | None = None
) -> Quota:
    try:
        with transaction.atomic():
            quota = Quota.objects.create(tenant=tenant, project=project, user=user, **limits)
    except IntegrityError as exc:
        raise Conflict("A quota for that scope exists already; update it instead.") from exc
    audit_record(
        actor=actor,
        tenant_id=tenant.id,
        action="quota.create",
        target=quota,
        changes=diff({}, snapshot(quota, LIMITS)),
        ip=ip,
    )
    return quota


@transaction.atomic
def quota_update(*, actor: Actor, quota: Quota, limits: dict, ip: str | None = None) -> Quota:
    before = snapshot(quota, LIMITS)
    for name, value in limits.items():
        setattr(quota, name, value)
    quota.save()
    audit_record(
        actor=actor,
        tenant_id=quota.tenant_id,
        action="quota.update",
        target=quota,
        changes=diff(before, snapshot(quota, LIMITS)),
        ip=ip,
    )
    _readmit(quota.tenant_id)
    return quota


@transaction.atomic
def quota_delete(*, actor: Actor, quota: Quota, ip: str | None = None) -> None:
    audit_record(
        actor=actor,
        tenant_id=quota.tenant_id,
        action="quota.delete",
        target=quota,
        changes=diff(snapshot(quota, LIMITS), {k: None for k in LIMITS}),
        ip=ip,
    )
    tenant_id = quota.tenant_id
    quota.delete()
    _readmit(tenant_id)


_limits_changed: list[Callable[..., object]] = []


def on_limits_changed(callback: Callable[..., object]) -> None:
    """Register what runs (in the writing transaction) when a tenant's limits change: the jobs
    app registers admission at start-up (its AppConfig.ready), so quotas never import jobs."""
    if callback not in _limits_changed:
        _limits_changed.append(callback)


def _readmit(tenant_id) -> None:
    for callback in _limits_changed:
        callback(tenant_id=tenant_id)


class StorageQuotaExceeded(Conflict):
    """Storing more bytes would pass a tenant's or project's storage limit (HTTP 409)."""

    code = "storage_quota_exceeded"


def storage_admit(*, tenant_id, project_id, add_bytes: int) -> None:
    """Refuse (StorageQuotaExceeded) unless `add_bytes` more fit under the tenant's and the
    project's storage limits. Call it in the transaction that records the bytes: with limits
    the tenant row is locked (as admission does), so two uploads never share the same room."""
    from apps.quotas.selectors import storage_used
    from apps.tenancy.models import Tenant

    limits = list(
        Quota.objects.filter(
            tenant_id=tenant_id, user__isnull=True, storage_bytes__isnull=False
        ).filter(models.Q(project__isnull=True) | models.Q(project_id=project_id))
    )
    if not limits:
        return
    Tenant.objects.select_for_update().get(pk=tenant_id)
    used = storage_used(tenant_ids=[tenant_id])
    for quota in limits:
        if quota.project_id is None:
            now = sum(used.values())
            scope = "the tenant"
        else:
            now = used.get((tenant_id, project_id), 0)
            scope = "the project"
        if now + add_bytes > quota.storage_bytes:
            raise StorageQuotaExceeded(
                f"Storing {add_bytes} more bytes would pass {scope}'s storage quota: "
                f"{now} of {quota.storage_bytes} bytes are used."
            )
