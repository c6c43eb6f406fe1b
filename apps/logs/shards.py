"""The shipper's shards, held by leases (apps/core/leases.py) instead of fixed at start.

Attempts fall into TORUS_SHIPPER_SHARDS shards by id. Every running shipper announces itself
in a member set (an entry that expires unless renewed) and holds, by one lease each, about
its share of the shards: `ceil(shards / live shippers)`. It gives back what it holds beyond
its share (so a shipper that joins gets work within a renewal) and takes free shards up to
it. A shipper that dies renews nothing: its member entry and its leases expire after
TORUS_SHIPPER_LEASE_SECONDS and the others take its shards on their next renewal.

Two shippers on one stream for a moment (a lease that passed while its holder was paused)
lose and double nothing: documents have ids by offset, metric points are unique by offset,
and a cursor moves only from the offset it was read at (apps/logs/shipper.py, _advance).
"""

import logging
import math
import time
import zlib

from redis.exceptions import RedisError

from apps.core.generations import counter_key, redis_client
from apps.core.leases import Lease, holder_id

logger = logging.getLogger(__name__)


class ShardLeases:
    """The shards this shipper holds; `refresh()` renews and rebalances (at most every third
    of the ttl, so it may be called before every stream), `owns()` says whether an attempt is
    ours, `release()` gives everything back on a clean stop."""

    def __init__(self, *, shards: int, ttl: float) -> None:
        self.count, self.ttl = shards, ttl
        self.holder = holder_id("shipper")
        self.leases = [
            Lease(name=f"shipper-shard:{n}", ttl=ttl, holder=self.holder) for n in range(shards)
        ]
        self.members_key = counter_key("shipper-members")
        self.held: set[int] = set()
        self.renewed_at = -math.inf
        # where this shipper starts looking for free shards: shippers spread out
        self.start = zlib.crc32(self.holder.encode()) % shards

    def owns(self, attempt_id) -> bool:
        return attempt_id.int % self.count in self.held

    def refresh(self, *, force: bool = False) -> frozenset[int]:
        now = time.monotonic()
        if not force and now - self.renewed_at < self.ttl / 3:
            return frozenset(self.held)
        self.renewed_at = now
        try:
            self._rebalance()
        except RedisError as exc:
            # nobody can take a shard while Redis is away: ship what was held, fenced by the
            # cursors' offsets should a lease pass meanwhile
            logger.warning("shard leases not renewed (Redis: %s); keeping %s", exc, self.held)
        return frozenset(self.held)

    def _rebalance(self) -> None:
        share = math.ceil(self.count / self._live_members())
        self.held = {n for n in self.held if self.leases[n].hold()}  # lost ones drop out
        for n in sorted(self.held, reverse=True)[: max(0, len(self.held) - share)]:
            self.leases[n].release()
            self.held.discard(n)
        for step in range(self.count):
            if len(self.held) >= share:
                break
            n = (self.start + step) % self.count
            if n not in self.held and self.leases[n].hold():
                self.held.add(n)

    def _live_members(self) -> int:
        client, now = redis_client(), time.time()
        with client.pipeline(transaction=True) as pipe:
            pipe.zadd(self.members_key, {self.holder: now + self.ttl})
            pipe.zremrangebyscore(self.members_key, "-inf", now)
            pipe.zcard(self.members_key)
            pipe.expire(self.members_key, math.ceil(self.ttl) * 10)
            return max(1, pipe.execute()[2])

    def release(self) -> None:
        for n in self.held:
            self.leases[n].release()
        self.held = set()
        redis_client().zrem(self.members_key, self.holder)
