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

from apps.core.generations import redis_client

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
        early = getattr(request, "_torus_window", None)
        if early is not None and early[0] == self.key:  # counted with the token's lookup
            _, self.now, result = early
            return self._take(result)
        return self._take(self._queue(redis_client(), cache))

    def _queue(self, client, cache, *, pipeline=None):
        """The script's result, or (with `pipeline`) its call queued there: by its sha alone,
        as a pipeline given the script would first ask Redis whether it has it (one more
        round trip). A Redis without it fails that pipeline; the script is then loaded by
        allow_request's own call."""
        global _script
        if _script is None:
            _script = client.register_script(_SLIDING_WINDOW)
        self.now = self.timer()
        keys = [cache.make_and_validate_key(f"{self.key}:z")]  # not the pickled list's key
        member = f"{self.now!r}:{os.urandom(4).hex()}"
        args = [repr(self.now), self.duration, self.num_requests, member]
        if pipeline is not None:
            return pipeline.evalsha(_script.sha, len(keys), *keys, *args)
        return _script(keys=keys, args=args, client=client)

    def _take(self, result) -> bool:
        allowed, self._count, oldest = result
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

    @classmethod
    def prefetch(cls, request, pipeline, token_pk):
        """Queue this token's window on `pipeline` (the token cache's round trip to Redis);
        the function returned keeps the result on the request for allow_request. The
        request counts even if a permission then refuses it."""
        throttle = cls()
        cache = caches[DEFAULT_CACHE_ALIAS]
        if throttle.rate is None or not isinstance(cache, RedisCache):
            return None
        throttle.key = throttle.cache_format % {"scope": cls.scope, "ident": f"token:{token_pk}"}
        throttle._queue(redis_client(), cache, pipeline=pipeline)

        def done(results) -> None:
            request._torus_window = (throttle.key, throttle.now, results[0])

        return done


class AnonymousRateThrottle(RedisWindowThrottle):
    scope = "anon"

    def get_cache_key(self, request, view):
        user = getattr(request, "user", None)
        if user and user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
