"""Leases in Redis: a named right held by one process at a time, for as long as it renews it.

A process that dies stops renewing, and its lease passes to another within `ttl` seconds;
nothing has to notice the death. Taking, renewing and giving back are each one Redis command
or script, checked against the holder's token, so a process whose lease has already passed
(paused past its ttl) can neither renew nor release what another now holds; work it still
does under the old lease must be safe to repeat (the log shipper's is: document ids and
cursor updates are fenced by offset).

Used by the log shipper (apps/logs/shards.py: one lease per shard) and Celery beat
(apps/core/beat.py: one active beat).
"""

import os
import socket

from apps.core.generations import counter_key, redis_client

# Renew if the key still holds our token (KEYS[1]; ARGV: token, ttl in ms): 1 when renewed.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
# Delete if the key still holds our token: 1 when released.
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


def holder_id(role: str) -> str:
    """A name for this process in lease values: role, host, pid (and uniqueness)."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


class Lease:
    """One named lease. `hold()` takes it when free or renews it when ours (True while held);
    `release()` gives it back at once (a clean stop need not wait out the ttl)."""

    def __init__(self, *, name: str, ttl: float, holder: str) -> None:
        if ttl <= 0:
            raise ValueError("a lease needs a positive ttl")
        self.name, self.ttl_ms, self.holder = name, int(ttl * 1000), holder
        self.key = counter_key(f"lease:{name}")

    def _client(self):
        client = redis_client()
        if client is None:
            raise RuntimeError("leases need the Redis cache backend")
        return client

    def hold(self) -> bool:
        client = self._client()
        if client.set(self.key, self.holder, px=self.ttl_ms, nx=True):
            return True
        return bool(client.eval(_RENEW, 1, self.key, self.holder, self.ttl_ms))

    def release(self) -> bool:
        return bool(self._client().eval(_RELEASE, 1, self.key, self.holder))

    def current_holder(self) -> str | None:
        value = self._client().get(self.key)
        return value.decode() if isinstance(value, bytes) else value
