"""Websocket authentication: the browser's session, or a bearer token for the SDK and CLI.

A token is read from the `Authorization: Bearer` header, or from a `bearer.<token>`
subprotocol (browsers cannot set headers on websockets).
"""

from channels.auth import AuthMiddlewareStack
from rest_framework.exceptions import AuthenticationFailed

from apps.core.db_threads import in_pool_thread
from apps.tenancy.access import actor_for_user
from apps.tenancy.authentication import token_lookup

SUBPROTOCOL_PREFIX = "bearer."


def _bearer_from_scope(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            parts = value.decode("latin-1").split()
            if len(parts) == 2 and parts[0].lower() == "bearer":
                return parts[1]
    for protocol in scope.get("subprotocols", []):
        if protocol.startswith(SUBPROTOCOL_PREFIX):
            return protocol[len(SUBPROTOCOL_PREFIX) :]
    return None


@in_pool_thread
def _token_actor(plaintext: str):
    try:
        token = token_lookup(plaintext)
    except AuthenticationFailed:
        return None
    return actor_for_user(user=token.user, token=token)


@in_pool_thread
def _session_actor(user):
    return actor_for_user(user=user)


class SessionActorMiddleware:
    """Puts scope["actor"] from the session's user (Channels' auth middleware, outside it)."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        user = scope.get("user")
        actor = await _session_actor(user) if user and user.is_authenticated else None
        return await self.inner({**scope, "actor": actor}, receive, send)


class TokenOrSessionActorMiddleware:
    """Puts scope["actor"] (an Actor or None) on every websocket connection. A socket with a
    bearer token skips the session and the user lookups of Channels' auth stack."""

    def __init__(self, inner):
        self.inner = inner
        self.by_session = AuthMiddlewareStack(SessionActorMiddleware(inner))

    async def __call__(self, scope, receive, send):
        plaintext = _bearer_from_scope(scope)
        if plaintext is None:
            return await self.by_session(scope, receive, send)
        actor = await _token_actor(plaintext)
        return await self.inner({**scope, "actor": actor}, receive, send)
