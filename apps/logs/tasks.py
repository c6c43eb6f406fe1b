"""Celery tasks of logs."""

import logging

from celery import shared_task

from apps.core.passes import Pass
from apps.logs.index import retention_apply
from apps.logs.usage import usage_pass
from apps.tenancy.models import Tenant

logger = logging.getLogger(__name__)
RETENTION = Pass("log_retention")  # apps/core/passes.py: one item per tenant


@shared_task(name="logs.apply_retention")
def apply_retention() -> int:
    """Delete every tenant's daily log indices older than its retention; how many."""
    deleted = 0
    for slug, days in Tenant.objects.values_list("slug", "log_retention_days"):
        with RETENTION.item(f"tenant:{slug}", atomic=False):  # one tenant's trouble, not all
            names = retention_apply(tenant_slug=slug, days=days)
            if names:
                logger.info("deleted %s (older than %d days)", ", ".join(names), days)
            deleted += len(names)
    return deleted


@shared_task(name="logs.usage_sample", expires=60)
def usage_sample() -> dict:
    """Every running job's CPU, memory and GPU sampled into its metrics; stalled and idle
    jobs told, idle ones past their grace cancelled (apps/logs/usage.py, idleness.py)."""
    return usage_pass()
