"""Reads for quotas: usage per period, grouped, always scoped to the actor's tenants."""

from collections.abc import Callable
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db.models import Count, Sum
from django.utils import timezone

from apps.core.actor import Actor
from apps.quotas.models import Quota, UsageRecord

GROUPS = {
    "tenant": ["tenant__slug"],
    "project": ["tenant__slug", "project__slug"],
    "user": ["tenant__slug", "user__username"],
    "project_user": ["tenant__slug", "project__slug", "user__username"],
}


def period_bounds(period: str | None) -> tuple[datetime, datetime, str]:
    """'2026-11' -> [start of November, start of December); default: this month."""
    now = timezone.now()
    text = period or f"{now:%Y-%m}"
    try:
        start = datetime.strptime(text, "%Y-%m").replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValidationError({"period": ["Use YYYY-MM."]}) from exc
    end = start.replace(year=start.year + (start.month == 12), month=start.month % 12 + 1)
    return start, end, text


def usage_summary(*, actor: Actor, period: str | None, group_by: str) -> list[dict]:
    if group_by not in GROUPS:
        raise ValidationError({"group_by": [f"One of: {', '.join(GROUPS)}."]})
    start, end, text = period_bounds(period)
    keys = GROUPS[group_by]
    rows = (
        UsageRecord.objects.visible_to(actor)
        .filter(ended_at__gte=start, ended_at__lt=end)
        .values(*keys)
        .annotate(
            gpu_seconds=Sum("gpu_seconds"),
            cpu_seconds=Sum("cpu_seconds"),
            attempts=Count("id"),
            jobs=Count("job", distinct=True),
        )
        .order_by(*keys)
    )
    result = []
    for row in rows:
        item = {key.split("__")[0]: row[key] for key in keys}
        item.update(
            period=text,
            gpu_hours=round((row["gpu_seconds"] or 0) / 3600, 4),
            cpu_hours=round((row["cpu_seconds"] or 0) / 3600, 4),
            gpu_seconds=round(row["gpu_seconds"] or 0, 1),
            cpu_seconds=round(row["cpu_seconds"] or 0, 1),
            jobs=row["jobs"],
            attempts=row["attempts"],
        )
        result.append(item)
    return result


def limits_of(*, tenant_id) -> list[Quota]:
    """Every quota of a tenant (what is allowed), with the names its reasons print."""
    return list(
        Quota.objects.filter(tenant_id=tenant_id).select_related("tenant", "project", "user")
    )


def gpu_seconds_by_project_user(*, tenant_id, since: datetime) -> dict[tuple, float]:
    """GPU-seconds in the ledger since `since`, per (project id, user id)."""
    rows = (
        UsageRecord.objects.filter(tenant_id=tenant_id, ended_at__gte=since)
        .values("project_id", "user_id")
        .annotate(seconds=Sum("gpu_seconds"))
    )
    return {(row["project_id"], row["user_id"]): row["seconds"] or 0.0 for row in rows}


def gpu_seconds_by_project(*, tenant_id, since: datetime) -> dict:
    """GPU-seconds in the ledger since `since`, per project id (fair share between projects)."""
    rows = (
        UsageRecord.objects.filter(tenant_id=tenant_id, ended_at__gte=since)
        .values("project_id")
        .annotate(seconds=Sum("gpu_seconds"))
    )
    return {row["project_id"]: row["seconds"] or 0.0 for row in rows}


# -- storage: bytes of datasets and model files --------------------------------------------------

_storage_sources: list[Callable[..., dict]] = []


def on_storage_usage(source: Callable[..., dict]) -> None:
    """Register a source of stored bytes: `source(tenant_ids=[...])` returns
    {(tenant id, project id): bytes}. Apps that store files (datasets, registry) register one
    at start-up (their AppConfig.ready), so quotas never import them."""
    if source not in _storage_sources:
        _storage_sources.append(source)


def storage_used(*, tenant_ids: list) -> dict[tuple, int]:
    """Bytes stored and being uploaded, per (tenant id, project id)."""
    used: dict[tuple, int] = {}
    for source in _storage_sources:
        for key, value in source(tenant_ids=tenant_ids).items():
            used[key] = used.get(key, 0) + int(value or 0)
    return used


def storage_summary(*, actor: Actor) -> list[dict]:
    """Storage per tenant and per project with its limit (None: unlimited), for usage."""
    from apps.tenancy.models import Project, Tenant

    tenant_ids = list(actor.tenant_ids)
    used = storage_used(tenant_ids=tenant_ids)
    limits = {
        (q.tenant_id, q.project_id): q.storage_bytes
        for q in Quota.objects.filter(tenant_id__in=tenant_ids, user__isnull=True)
    }
    rows = []
    for tenant in Tenant.objects.filter(pk__in=tenant_ids).order_by("slug"):
        total = sum(v for (t, _), v in used.items() if t == tenant.pk)
        rows.append(
            {
                "tenant": tenant.slug,
                "project": None,
                "used_bytes": total,
                "limit_bytes": limits.get((tenant.pk, None)),
            }
        )
        for project in Project.objects.filter(tenant=tenant).order_by("slug"):
            key = (tenant.pk, project.pk)
            if key in used or limits.get(key) is not None:
                rows.append(
                    {
                        "tenant": tenant.slug,
                        "project": project.slug,
                        "used_bytes": used.get(key, 0),
                        "limit_bytes": limits.get(key),
                    }
                )
    return rows
