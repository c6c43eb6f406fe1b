"""Generation counters in Redis, for caches kept in each process (apps/tenancy/token_cache.py,
apps/jobs/submit_cache.py): an entry is used only while the counters it was read under stand.

A counter moves to a fresh random value, not INCR: a counter lost (a flushed Redis) and
counted up again could come back to a value an entry holds. It moves at once and again after
the transaction commits: a reader that saw the old rows while the change was being committed
holds the value from before the second move. Without Redis (another cache backend) nothing
is cached: `redis_client()` is None.
"""

import logging
import os

from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.redis import RedisCache
from django.db import transaction
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

COUNTER_SECONDS = 86400  # longer than any entry lives: an expired counter reads as never moved


def redis_client():
    """The cache's Redis client (its writer), made once per cache object: Django's
    `get_client()` builds a new client, with its table of response callbacks, on each call
    (0.1 to 0.25 ms, twice a request); the client and its connection pool are thread-safe."""
    cache = caches[DEFAULT_CACHE_ALIAS]
    if not isinstance(cache, RedisCache):
        return None
    backend = cache._cache
    client = getattr(backend, "torus_client", None)
    if client is None:
        client = backend.torus_client = backend.get_client(write=True)
    return client


def counter_key(name: str) -> str:
    return caches[DEFAULT_CACHE_ALIAS].make_and_validate_key(name)


def move(keys: list[str], *, what: str) -> None:
    """Move these counters now and again after the transaction commits. Redis away: the
    caches' TTL bounds what a missed move costs (logged, not raised)."""
    client = redis_client() if keys else None
    if client is None:
        return

    def set_fresh() -> None:
        value = os.urandom(8).hex()
        try:
            with client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.set(key, value, ex=COUNTER_SECONDS)
                pipe.execute()
        except RedisError as exc:
            logger.warning("%s: could not move %s: %s", what, keys, exc)

    set_fresh()
    transaction.on_commit(set_fresh)
