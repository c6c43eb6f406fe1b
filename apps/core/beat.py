"""Celery beat that sends only while it holds the "beat" lease (apps/core/leases.py).

Several beats may run (scripts/portal starts a second with TORUS_SCALE=2); the one holding the
lease sends, the others send nothing and try to take it about every second. A beat that dies
stops renewing: after at most TORUS_BEAT_LEASE_SECONDS a standby takes over and at once sends
each task whose time passed in its own schedule file, once (PersistentScheduler's catch-up:
one send per entry, not one per missed period). A clean stop gives the lease back, so a
standby takes over at its next try. Without Redis no beat can tell it is the only one: none
sends until Redis answers again.
"""

import logging

from celery.beat import PersistentScheduler
from django.conf import settings
from redis.exceptions import RedisError

from apps.core.leases import Lease, holder_id

logger = logging.getLogger(__name__)

STANDBY_SECONDS = 1.0  # between a standby's tries to take the lease (at most a third of the ttl)


class LeasedScheduler(PersistentScheduler):
    """PersistentScheduler whose `tick()` first takes or renews the lease and sends only while
    it is held; ticks are at most a third of the ttl apart, so the lease never lapses between
    renewals of a live beat."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        ttl = float(settings.TORUS_BEAT_LEASE_SECONDS)
        self.lease = Lease(name="beat", ttl=ttl, holder=holder_id("beat"))
        self.renew_every = ttl / 3
        self._state: str | None = None  # "active", "standby" or "unreachable", once known
        self._released = False

    def tick(self, *args, **kwargs) -> float:
        if not self._hold():
            return min(STANDBY_SECONDS, self.renew_every)
        return min(super().tick(*args, **kwargs), self.renew_every)

    def _hold(self) -> bool:
        try:
            held = self.lease.hold()
        except RedisError as exc:
            if self._state != "unreachable":
                logger.warning(
                    "beat: cannot reach Redis (%s); sending nothing until it answers", exc
                )
                self._state = "unreachable"
            return False
        state = "active" if held else "standby"
        if state != self._state:
            self._state = state
            if held:
                logger.info("beat: active (lease held as %s)", self.lease.holder)
            else:
                logger.info("beat: standby (lease held by %s)", self._other_holder())
        return held

    def _other_holder(self) -> str | None:
        try:
            return self.lease.current_holder()
        except RedisError:
            return None

    def close(self) -> None:
        # Celery's SIGTERM handler closes, then the beat loop's exit closes again: release once.
        try:
            super().close()
        finally:
            if not self._released:
                self._released = True
                try:
                    if self.lease.release():
                        logger.info("beat: lease released")
                except RedisError as exc:
                    logger.warning("beat: could not release the lease (%s); it expires", exc)

    @property
    def info(self) -> str:
        return f"{super().info}\n    . lease -> {self.lease.key} ({self.lease.ttl_ms / 1000:g} s)"
