"""Telling open websockets that someone's access changed: one Channels group per user and per
access token. Services publish after commit; each consumer then re-checks from the database
(the message carries no verdict), and closes with 4401 or 4403 if access has ended."""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


def user_group(user_id) -> str:
    return f"access-user-{user_id}"


def token_group(token_id) -> str:
    return f"access-token-{token_id}"


def _send(groups: list[str]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        for group in groups:
            async_to_sync(layer.group_send)(group, {"type": "access.changed"})
    except Exception as exc:  # the periodic re-check is the backstop
        logger.warning("access-changed publish failed: %s", exc)


def publish_access_changed(*, user_ids=(), token_ids=()) -> None:
    """After the transaction commits: ask these users' and tokens' sockets to re-check."""
    groups = [user_group(u) for u in user_ids] + [token_group(t) for t in token_ids]
    if groups:
        transaction.on_commit(lambda: _send(groups))
