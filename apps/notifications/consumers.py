"""/ws/notifications/: the UI's bell, live. A signed-in person's socket joins their inbox group
(apps/notifications/bell.py) and gets each new item of their subscriptions, in the tenants they
are still a member of; it closes when their credentials end (4401)."""

from apps.logs.consumers import GroupSocket
from apps.notifications.bell import inbox_group
from apps.tenancy.consumers import CLOSE_UNAUTHENTICATED, refuse


class BellConsumer(GroupSocket):
    async def connect(self):
        actor = self.scope.get("actor")
        if actor is None:
            await refuse(self, CLOSE_UNAUTHENTICATED)
            return
        await self.join(inbox_group(actor.user.pk))
        await self.send_json({"type": "subscribed"})

    async def still_allowed(self) -> bool:
        return True  # the items are filtered by the actor's tenants as they come

    async def bell_items(self, event):
        tenants = {str(tenant) for tenant in self.scope["actor"].tenant_ids}
        items = [item for item in event["items"] if item["tenant"] in tenants]
        if items:
            await self.send_json({"type": "items", "items": items})
