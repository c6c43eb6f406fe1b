"""Django's Redis cache with its connection pools kept for the life of the process.

Django keeps a cache object per async context (its CacheHandler is an asgiref Local that is
not thread-critical), so under ASGI every request makes its own RedisCache, whose client made
its own connection pool: each request opened a new connection to Redis (with redis-py's
handshake) and dropped the previous one when it was collected. Here the pools are shared by
every cache object of the process with the same server and options; the objects stay cheap.
"""

import threading

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_pools: dict = {}
_lock = threading.Lock()


class SharedPoolClient(RedisCacheClient):
    def _get_connection_pool(self, write):
        index = self._get_connection_pool_index(write)
        key = (self._servers[index], self._pool_class, repr(sorted(self._pool_options.items())))
        pool = _pools.get(key)
        if pool is None:
            with _lock:
                pool = _pools.get(key)
                if pool is None:
                    pool = _pools[key] = super()._get_connection_pool(write)
        return pool


class SharedPoolRedisCache(RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = SharedPoolClient
