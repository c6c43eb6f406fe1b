"""One Redis connection pool per process for the cache (apps/core/cache.py), though Django
makes a cache object per async context, that is per ASGI request."""

import contextvars

from django.core.cache import caches


def _cache_and_pool():
    cache = caches["default"]
    return cache, cache._cache.get_client(write=True).connection_pool


def test_two_requests_contexts_share_one_connection_pool():
    # each ASGI request runs in a context of its own: Django gives each its own cache object
    first_cache, first_pool = contextvars.Context().run(_cache_and_pool)
    second_cache, second_pool = contextvars.Context().run(_cache_and_pool)
    assert first_cache is not second_cache
    assert first_pool is second_pool


def test_a_connection_is_reused_across_contexts():
    def ping_and_connection_id():
        cache, _ = _cache_and_pool()
        client = cache._cache.get_client(write=True)
        return client.client_id()

    first = contextvars.Context().run(ping_and_connection_id)
    second = contextvars.Context().run(ping_and_connection_id)
    assert first == second  # the same server-side connection answered both
