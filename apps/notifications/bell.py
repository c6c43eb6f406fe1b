"""The UI's bell: every event a person's subscriptions matched, whatever their channel, live on
/ws/notifications/ (one Channels group per person) and the latest in the API's inbox."""

from apps.logs.live import publish
from apps.notifications.models import Notification

INBOX_SIZE = 50


def inbox_group(user_id) -> str:
    return f"inbox-{user_id}"


def bell_publish(*, items: dict) -> None:
    """{(user id, event id): (tenant id, item)}: each person's new items, one message each."""
    by_user: dict = {}
    for (user_id, _event), (tenant_id, item) in items.items():
        by_user.setdefault(user_id, []).append({**item, "tenant": str(tenant_id)})
    publish(
        messages=[
            (inbox_group(user_id), {"type": "bell.items", "items": found})
            for user_id, found in by_user.items()
        ]
    )


def inbox(*, subscriptions) -> list[dict]:
    """The latest INBOX_SIZE items of these subscriptions' messages, newest first, each event
    once (a person told by e-mail and in the app sees it once)."""
    rows = (
        Notification.objects.filter(subscription__in=subscriptions)
        .order_by("-created_at")
        .values_list("items", "subscription__tenant_id")[: INBOX_SIZE * 2]
    )
    seen, out = set(), []
    for items, tenant_id in rows:
        for item in items:
            if item["event_id"] not in seen:
                seen.add(item["event_id"])
                out.append({**item, "tenant": str(tenant_id)})
    return sorted(out, key=lambda item: item["at"], reverse=True)[:INBOX_SIZE]
