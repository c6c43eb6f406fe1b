"""Websocket consumers of tenancy: /ws/me/ answers who is connected (a handshake check), and
the mixin that ends a socket when its access ends.

Close codes (docs/logs.md):
  4401  not signed in, or the credentials are no longer valid (token revoked or expired,
        session logged out or expired, user deactivated)
  4403  signed in, but no longer allowed (membership removed, role no longer enough)
  4404  no such object, or another tenant's
"""

import asyncio
import contextlib
import random

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from apps.core.db_threads import QueriesInPoolThreads, in_pool_thread
from apps.tenancy.live import token_group, user_group

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


async def refuse(consumer, code: int) -> None:
    """Accept, then close with `code`: a socket closed before it is accepted reaches a browser
    as a failed handshake (HTTP 403, code 1006, an error in its console, and a reconnect),
    never as the reason; accepted first, it reads 4401, 4403 or 4404 and stays away."""
    await consumer.accept()
    await consumer.close(code=code)


@in_pool_thread
def credentials_valid(scope) -> bool:
    """The socket's token is still live, or its session still signed in as the same user."""
    from importlib import import_module

    from apps.tenancy.models import AccessToken

    actor = scope["actor"]
    token = actor.token
    if token is not None:
        row = (
            AccessToken.objects.filter(pk=token.pk)
            .values("revoked_at", "expires_at", "user__is_active")
            .first()
        )
        return bool(
            row
            and row["revoked_at"] is None
            and row["user__is_active"]
            and (row["expires_at"] is None or row["expires_at"] > timezone.now())
        )
    session = scope.get("session")
    key = getattr(session, "session_key", None)
    if not key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
    data = store.load()  # {} once logged out (deleted) or expired
    if data.get("_auth_user_id") != str(actor.user.pk):
        return False
    actor.user.refresh_from_db(fields=["is_active", "password"])
    return actor.user.is_active and data.get("_auth_user_hash") == (
        actor.user.get_session_auth_hash()
    )


class AccessWatchMixin:
    """For consumers that stay open: joins the user's and token's access groups (services
    publish there on revocation and membership changes) and re-checks every
    TORUS_LIVE_ACCESS_RECHECK_SECONDS as a backstop (expiry, a missed message). Subclasses
    implement `still_allowed()` (a coroutine: may the actor still see this object?)."""

    async def watch_access(self) -> None:
        actor = self.scope["actor"]
        self.access_groups = [user_group(actor.user.pk)]
        if actor.token is not None:
            self.access_groups.append(token_group(actor.token.pk))
        for group in self.access_groups:
            await self.channel_layer.group_add(group, self.channel_name)
        self.access_task = asyncio.ensure_future(self._recheck_loop())

    async def unwatch_access(self) -> None:
        task = getattr(self, "access_task", None)
        if task is not None:
            self.access_task = None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        groups, self.access_groups = getattr(self, "access_groups", []), []
        for group in groups:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _recheck_loop(self) -> None:
        interval = settings.TORUS_LIVE_ACCESS_RECHECK_SECONDS
        await asyncio.sleep(interval * random.uniform(0.5, 1.0))  # noqa: S311 (jitter)
        while True:
            if await self.recheck_access():
                return
            await asyncio.sleep(interval)

    async def recheck_access(self) -> bool:
        """Close the socket if access has ended; True when it did."""
        if getattr(self, "access_closed", False):
            return True
        code = None
        if not await credentials_valid(self.scope):
            code = CLOSE_UNAUTHENTICATED
        elif not await self.still_allowed():
            code = CLOSE_FORBIDDEN
        if code is None:
            return False
        self.access_closed = True
        await self.close(code=code)
        return True

    async def access_changed(self, event) -> None:
        await self.recheck_access()


class WhoAmIConsumer(QueriesInPoolThreads, AsyncJsonWebsocketConsumer):
    async def connect(self):
        actor = self.scope.get("actor")
        if actor is None:
            await refuse(self, CLOSE_UNAUTHENTICATED)
            return
        await self.accept()
        await self.send_json(
            {
                "user": actor.user.username,
                "tenants": {str(k): v for k, v in actor.roles.items()},
                "read_only": actor.read_only,
            }
        )
