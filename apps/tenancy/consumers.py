"""Websocket consumers of tenancy: /ws/me/ answers who is connected (a handshake check)."""

from channels.generic.websocket import AsyncJsonWebsocketConsumer

CLOSE_UNAUTHENTICATED = 4401


class WhoAmIConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        actor = self.scope.get("actor")
        if actor is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.accept()
        await self.send_json(
            {
                "user": actor.user.username,
                "tenants": {str(k): v for k, v in actor.roles.items()},
                "read_only": actor.read_only,
            }
        )
