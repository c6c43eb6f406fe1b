"""Celery tasks of deployments."""

from celery import shared_task
from django.core.cache import cache

from apps.serving.reconcile import reconcile_all

LOCK = "torus:lock:serving-reconcile"


@shared_task(name="serving.reconcile")
def reconcile() -> int:
    """One pass of the deployments' reconciler (apps/serving/reconcile.py); one at a time."""
    if not cache.add(LOCK, "1", timeout=120):
        return 0
    try:
        return reconcile_all()
    finally:
        cache.delete(LOCK)
