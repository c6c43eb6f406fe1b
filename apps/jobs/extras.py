"""What apps above jobs add to jobs without jobs importing them, registered from their
AppConfig.ready(): announcers of committed state changes (the live viewers, notifications),
annotations of the API's job rows (the failure signatures matched), a job's latest metrics
(for a model version registered from the job), and who is told of what happens to jobs
besides their states: waiting longer than expected, stalled, idle (notifications)."""

import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

_announcers: dict[str, Callable[..., None]] = {}
_annotations: dict[str, Callable[[], Any]] = {}
_latest_metrics: dict[str, Callable[..., dict]] = {}
_noticers: dict[str, Callable[..., None]] = {}


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


def noticer_register(notify: Callable[..., None]) -> None:
    """`notify(kind=..., reasons={job id: why}, occurrence=...)` runs when something happens
    to jobs that is not a state change: `waiting_too_long` (apps/jobs/estimates.py, once per
    job), `stalled` and `idle` (apps/logs/idleness.py, once per occurrence: `occurrence`
    tells one from the next)."""
    _noticers[_name(notify)] = notify


def notice(*, kind: str, reasons: dict[str, str], occurrence: str = "") -> None:
    for name, notify in list(_noticers.items()):
        try:
            notify(kind=kind, reasons=reasons, occurrence=occurrence)
        except Exception:
            logger.exception("%s failed on %d jobs %s", name, len(reasons), kind)
