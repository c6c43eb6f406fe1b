"""Rate limits per access token (or per user for sessions) and per address for anonymous calls.

DRF's SimpleRateThrottle keeps each key's history as a pickled list in the cache: two round
trips per request and a list of up to `num_requests` timestamps (6,000 at the default rate)
unpickled and pickled again each time. Here the same sliding window is a Redis sorted set
trimmed, counted and appended by one script: one round trip, nothing decoded but two numbers.
"""

import os

from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.redis import RedisCache
from rest_framework.throttling import SimpleRateThrottle

# KEYS[1]: the window; ARGV: now, duration (s), limit, a unique member. Returns {allowed,
# requests in the window, the oldest one's time (as a string) when refused}.
_SLIDING_WINDOW = """
local key, now = KEYS[1], tonumber(ARGV[1])
local duration, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - duration)
local count = redis.call('ZCARD', key)
if count >= limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, count, oldest[2]}
end
redis.call('ZADD', key, now, ARGV[4])
redis.call('PEXPIRE', key, math.ceil(duration * 1000))
return {1, count + 1, ''}
"""
_script = None


class RedisWindowThrottle(SimpleRateThrottle):
    """SimpleRateThrottle's sliding window (same limits, same Retry-After) in one Redis call."""

    def allow_request(self, request, view):
        cache = caches[DEFAULT_CACHE_ALIAS]  # self.cache is its proxy
        if self.rate is None or not isinstance(cache, RedisCache):
            return super().allow_request(request, view)
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        global _script
        client = cache._cache.get_client(write=True)
        if _script is None:
            _script = client.register_script(_SLIDING_WINDOW)
        self.now = self.timer()
        member = f"{self.now!r}:{os.urandom(4).hex()}"
        allowed, self._count, oldest = _script(
            keys=[cache.make_and_validate_key(f"{self.key}:z")],  # not the pickled list's key
            args=[repr(self.now), self.duration, self.num_requests, member],
            client=client,
        )
        self._oldest = float(oldest) if not allowed else self.now
        return bool(allowed)

    def wait(self):
        if not hasattr(self, "_count"):
            return super().wait()
        remaining = self.duration - (self.now - self._oldest)
        available = self.num_requests - self._count + 1
        return remaining / float(available) if available > 0 else None


class PrincipalRateThrottle(RedisWindowThrottle):
    scope = "principal"

    def get_cache_key(self, request, view):
        user = getattr(request, "user", None)
        if not user or not user.is_authenticated:
            return None
        token = getattr(request, "auth", None)
        ident = f"token:{token.pk}" if getattr(token, "pk", None) else f"user:{user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class AnonymousRateThrottle(RedisWindowThrottle):
    scope = "anon"

    def get_cache_key(self, request, view):
        user = getattr(request, "user", None)
        if user and user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
