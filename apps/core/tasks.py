"""Core Celery tasks."""

from celery import shared_task


@shared_task(name="core.ping")
def ping() -> str:
    """A round trip through the broker and a worker (used by /readyz and operators)."""
    return "pong"
