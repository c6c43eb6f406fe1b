"""What apps above jobs add to jobs without jobs importing them, registered from their
AppConfig.ready(): announcers of committed state changes (the live viewers, notifications),
annotations of the API's job rows (the failure signatures matched), a job's latest metrics
(for a model version registered from the job), and who is told of jobs waiting longer than
expected (notifications)."""

import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

_announcers: dict[str, Callable[..., None]] = {}
_annotations: dict[str, Callable[[], Any]] = {}
_latest_metrics: dict[str, Callable[..., dict]] = {}
_overdue: dict[str, Callable[..., None]] = {}


def _name(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"  # a second ready() registers nothing twice


def announcer_register(announce: Callable[..., None]) -> None:
    """`announce(events=[JobEvent, ...])` runs after each commit that changed jobs' states."""
    _announcers[_name(announce)] = announce


def announce(*, events: list) -> None:
    """Each announcer in turn, after the commit: one that raises is logged and the others
    still run (the states are committed; only that announcement is lost)."""
    for name, announcer in list(_announcers.items()):
        try:
            announcer(events=events)
        except Exception:
            logger.exception("announcer %s failed on %d state changes", name, len(events))


def annotation_register(*, name: str, expression: Callable[[], Any]) -> None:
    """The API's job list and detail rows are annotated with `name=expression()` (a query
    expression over the job's OuterRef("pk"), so no query per row)."""
    _annotations[name] = expression


def annotations() -> dict[str, Any]:
    return {name: make() for name, make in _annotations.items()}


def latest_metrics_register(read: Callable[..., dict]) -> None:
    """`read(job=job)` gives {metric name: its last value} for a job."""
    _latest_metrics[_name(read)] = read


def latest_metrics(*, job) -> dict:
    metrics: dict = {}
    for read in list(_latest_metrics.values()):
        metrics.update(read(job=job))
    return metrics


def overdue_register(notify: Callable[..., None]) -> None:
    """`notify(job_ids=[...])` runs when jobs wait past the p90 first predicted for them
    (apps/jobs/estimates.py), once per job."""
    _overdue[_name(notify)] = notify


def overdue(*, job_ids: list[str]) -> None:
    for name, notify in list(_overdue.items()):
        try:
            notify(job_ids=job_ids)
        except Exception:
            logger.exception("%s failed on %d jobs waiting too long", name, len(job_ids))
