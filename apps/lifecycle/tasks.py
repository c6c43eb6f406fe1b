"""Celery tasks of purges: run one (by its id), and resume those a crash left running."""

import logging
from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from apps.lifecycle.models import Purge, PurgeState
from apps.lifecycle.purge import purge_run

logger = logging.getLogger(__name__)

STALE_AFTER = timedelta(minutes=10)  # a running purge with no progress this long is resumed


@shared_task(name="lifecycle.purge_run", acks_late=True)
def purge_run_task(purge_id: str) -> str:
    """Run or resume one purge; safe to run twice (done steps are skipped). A step that
    fails leaves it running with its error: the resume pass tries again later."""
    purge = Purge.objects.filter(pk=purge_id).first()
    if purge is None or purge.state == PurgeState.DONE:
        return "done" if purge else "missing"
    try:
        purge = purge_run(purge=purge)
    except Exception as exc:  # recorded on the row (last_error); resumed by purge_resume
        logger.warning("purge %s left running: %s", purge_id, exc)
        return "running"
    return purge.state


@shared_task(name="lifecycle.purge_resume")
def purge_resume() -> list[str]:
    """Beat: send again every purge left running without progress for ten minutes."""
    stale = Purge.objects.filter(
        state=PurgeState.RUNNING, updated_at__lt=timezone.now() - STALE_AFTER
    ).values_list("pk", flat=True)
    ids = [str(pk) for pk in stale]
    for purge_id in ids:
        purge_run_task.delay(purge_id)
    return ids
