"""Bearer tokens resolved once per web process, not once per request.

Every API request needs its token with the user, the tenant and the user's role there (one
query with a subquery: a quarter of a small request's CPU). A resolved token is kept in the
process for up to TTL_SECONDS, pickled (each request gets its own copy), beside the values
that three generation counters in Redis had just BEFORE it was read from the database: the
token's, its user's and its tenant's (a token seen for the first time is read, its counters,
then read again). A hit reads the three counters (one MGET) and is used only if none has
moved since; any difference reads the database again.

The counters are bumped by post_save/post_delete of AccessToken (the token's), Membership
and User (the user's: a role change, a removal, a deactivation) and Tenant (the tenant's),
connected in TenancyConfig.ready (a bump sets a new random value), so a revoked token, a
removed member or a deactivated user is refused on the next request, by this process and
every other. Each bump happens at once
and again after the transaction commits: a request that read the old rows while the change
was being committed holds counters from before the second bump. A change made with
QuerySet.update() sends no signal: such code calls `bump()` itself; TTL_SECONDS bounds what a
forgotten one could cost. Without Redis nothing is cached.
"""

import logging
import pickle
import time
from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock

from redis.exceptions import RedisError

from apps.core.generations import counter_key, redis_client
from apps.core.generations import move as generations_move

logger = logging.getLogger(__name__)

TTL_SECONDS = 60.0
MAX_ENTRIES = 4096
KEY = "authgen:{kind}:{id}"


@dataclass
class Entry:
    token: bytes  # the pickled AccessToken with its user and tenant and member_role
    token_pk: object
    keys: list[str]  # its counters: the token's, its user's, its tenant's
    generations: list  # their values just before the token was read
    expires: float
    last_used_at: object  # kept current by note_use (the pickle has the first value)


class TokenCache:
    """Resolved tokens by hash, in this process (each web worker has its own)."""

    def __init__(self, *, ttl: float = TTL_SECONDS, max_entries: int = MAX_ENTRIES):
        self.ttl, self.max_entries = ttl, max_entries
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._lock = Lock()

    def resolve(self, token_hash: str, load, *, also=None):
        """The token for `token_hash`: the cached one if its counters have not moved, else
        `load()` (which reads the database, or raises). With a cached entry, `also(pipeline,
        token_pk)` may queue Redis commands to go in the same round trip as the counters (the
        throttle's window) and return a function that is given their results."""
        client = redis_client()
        if client is None:
            return load()
        entry = self._entries.get(token_hash)
        if entry is None:  # first sight: its counters are known once its row is
            token = load()
            keys = _keys(token)
            try:
                generations = client.mget(keys)
            except RedisError as exc:  # Redis away: the database decides
                logger.warning("token cache: generations unreadable: %s", exc)
                return token
            token = load()  # read again, after the counters
            self._store(token_hash, token, keys, generations)
            return token
        try:
            with client.pipeline(transaction=False) as pipe:
                pipe.mget(entry.keys)
                done = also(pipe, entry.token_pk) if also is not None else None
                generations, *queued = pipe.execute()
        except RedisError as exc:
            logger.warning("token cache: generations unreadable: %s", exc)
            return load()
        if done is not None:
            done(queued)
        if generations == entry.generations and entry.expires > time.monotonic():
            token = pickle.loads(entry.token)  # noqa: S301 (pickled by this process)
            token.last_used_at = entry.last_used_at
            return token
        token = load()  # stale or expired: read after the counters
        self._store(token_hash, token, entry.keys, generations)
        return token

    def _store(self, token_hash: str, token, keys: list[str], generations: list) -> None:
        entry = Entry(
            token=pickle.dumps(token, protocol=pickle.HIGHEST_PROTOCOL),
            token_pk=token.pk,
            keys=keys,
            generations=generations,
            expires=time.monotonic() + self.ttl,
            last_used_at=token.last_used_at,
        )
        with self._lock:
            self._entries[token_hash] = entry
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)  # the oldest

    def note_use(self, token_hash: str, when) -> None:
        """The token's use was recorded at `when` (so a hit does not record it again)."""
        entry = self._entries.get(token_hash)
        if entry is not None:
            entry.last_used_at = when

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _key(kind: str, ident) -> str:
    return counter_key(KEY.format(kind=kind, id=ident))


def _keys(token) -> list[str]:
    return [
        _key("token", token.pk),
        _key("user", token.user_id),
        _key("tenant", token.tenant_id),
    ]


def bump(*, token_ids=(), user_ids=(), tenant_ids=()) -> None:
    """Move these counters now and again after the transaction commits: cached tokens that
    depend on them are read from the database on their next use, in every process."""
    keys = (
        [_key("token", i) for i in token_ids]
        + [_key("user", i) for i in user_ids]
        + [_key("tenant", i) for i in tenant_ids]
    )
    generations_move(keys, what="token cache")


def _on_token(sender, instance, **kwargs) -> None:
    bump(token_ids=[instance.pk])


def _on_membership(sender, instance, **kwargs) -> None:
    bump(user_ids=[instance.user_id])


def _on_user(sender, instance, **kwargs) -> None:
    if kwargs.get("update_fields") == frozenset({"last_login"}):
        return  # a sign-in: nothing a token depends on
    bump(user_ids=[instance.pk])


def _on_tenant(sender, instance, **kwargs) -> None:
    bump(tenant_ids=[instance.pk])


def connect_signals() -> None:
    """Called from TenancyConfig.ready: every process that changes these rows bumps."""
    from django.contrib.auth import get_user_model
    from django.db.models.signals import post_delete, post_save

    from apps.tenancy.models import AccessToken, Membership, Tenant

    for model, receiver in (
        (AccessToken, _on_token),
        (Membership, _on_membership),
        (get_user_model(), _on_user),
        (Tenant, _on_tenant),
    ):
        for signal in (post_save, post_delete):
            signal.connect(receiver, sender=model, dispatch_uid=f"token-cache-{model.__name__}")


tokens = TokenCache()
