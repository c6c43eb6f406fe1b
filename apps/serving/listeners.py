"""Who is told when a deployment starts failing or recovers: registered from an AppConfig's
ready() (notifications), so serving never imports them. Called after the commit that recorded
the change; a listener that raises is logged and the others still run."""

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

_listeners: dict[str, Callable[..., None]] = {}


def listener_register(listen: Callable[..., None]) -> None:
    """`listen(deployment_id=..., kind="failing"|"recovered", event_id=..., reason=...)`."""
    _listeners[f"{listen.__module__}.{listen.__qualname__}"] = listen


def health_changed(*, deployment_id, kind: str, event_id, reason: str) -> None:
    for name, listen in list(_listeners.items()):
        try:
            listen(deployment_id=deployment_id, kind=kind, event_id=event_id, reason=reason)
        except Exception:
            logger.exception("%s failed on deployment %s %s", name, deployment_id, kind)
