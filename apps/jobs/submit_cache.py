"""What a submission reads that rarely changes, kept in each web process: where a job of a
given shape goes (its placement) and whether a tenant has any quota.

The pattern of apps/tenancy/token_cache.py: an entry keeps the values that generation
counters in Redis had just before it was read from the database, and is used only while
they have not moved. A submission reads the counters it needs once (one Redis round trip,
`generations()`). `placement` is bumped by every save or delete of a Cluster, and by a
Partition's or a Node's that changes what placement reads (the reconciler saves every node
on each pass; most passes change none of it); `quotas:<tenant>` by a Quota's save or delete
(signals connected in JobsConfig.ready). Each bump happens at once and again after the
transaction commits, and sets a new random value. A missing counter (a flushed or restarted
Redis, or one expired after COUNTER_SECONDS) is created with a random value before it is
read, so an entry can never match a counter that came back empty. Entries also expire after
TTL_SECONDS. Without Redis nothing is cached.
"""

import logging
import os
import pickle
import time
from collections import OrderedDict
from threading import Lock

from redis.exceptions import RedisError

from apps.core.generations import COUNTER_SECONDS, counter_key, redis_client
from apps.core.generations import move as generations_move

logger = logging.getLogger(__name__)

TTL_SECONDS = 60.0
MAX_ENTRIES = 4096
PLACEMENT = "placement"


def quotas_counter(tenant_id) -> str:
    return f"quotas:{tenant_id}"


class _Entries:
    """Values by key, each with the counter value it was read under and an expiry."""

    def __init__(self) -> None:
        self._entries: OrderedDict = OrderedDict()
        self._lock = Lock()

    def get(self, key, generation):
        entry = self._entries.get(key)
        if entry is None or entry[1] != generation or entry[2] <= time.monotonic():
            return None
        return entry[0]

    def put(self, key, value, generation) -> None:
        with self._lock:
            self._entries[key] = (value, generation, time.monotonic() + TTL_SECONDS)
            self._entries.move_to_end(key)
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_placements = _Entries()
_quotas = _Entries()


def _key(counter: str) -> str:
    return counter_key(f"jobgen:{counter}")


def generations(*, tenant_ids) -> dict | None:
    """The counters a submission for these tenants depends on, {counter: value}, read in one
    round trip (missing ones created first); None without Redis or when it is unreachable."""
    client = redis_client()
    if client is None:
        return None
    counters = [PLACEMENT, *(quotas_counter(t) for t in dict.fromkeys(tenant_ids))]
    keys = [_key(c) for c in counters]
    try:
        with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.set(key, os.urandom(8).hex(), nx=True, ex=COUNTER_SECONDS)
            pipe.mget(keys)
            *_, values = pipe.execute()
    except RedisError as exc:
        logger.warning("submit cache: generations unreadable: %s", exc)
        return None
    return dict(zip(counters, values, strict=True))


def placement(gens: dict | None, key: tuple, load):
    """Where a job of `key` (what placement depends on) can go, as `load()` gives it (the
    fitting (cluster, partition) pairs): the cached value while the `placement` counter
    stands, else `load()`; refusals (exceptions) are not kept."""
    if gens is None:
        return load()
    cached = _placements.get(key, gens[PLACEMENT])
    if cached is not None:
        return pickle.loads(cached)  # noqa: S301 (pickled by this process)
    found = load()
    _placements.put(key, pickle.dumps(found), gens[PLACEMENT])
    return found


def has_quotas(gens: dict | None, tenant_id, load) -> bool:
    """Whether the tenant has any quota: cached while its `quotas:<tenant>` counter stands."""
    if gens is None:
        return load()
    counter = quotas_counter(tenant_id)
    cached = _quotas.get(tenant_id, gens[counter])
    if cached is not None:
        return cached
    found = bool(load())
    _quotas.put(tenant_id, found, gens[counter])
    return found


def bump(*counters: str) -> None:
    """Move these counters: entries that depend on them are read from the database on their
    next use, in every process."""
    generations_move([_key(c) for c in counters], what="submit cache")


def clear() -> None:
    _placements.clear()
    _quotas.clear()


# What placement (apps/compute/placement.py) reads of a partition and a node.
PLACEMENT_FIELDS = {
    "Partition": ("cluster_id", "name", "is_default", "max_time_minutes", "node_names"),
    "Node": ("cluster_id", "name", "partitions", "cpus", "memory_mb", "accelerators"),
}


def _placement_values(instance) -> str | None:
    """Those fields as text (a copy that in-place edits cannot reach); None when one is
    deferred (reading it would cost a query per row)."""
    names = PLACEMENT_FIELDS[type(instance).__name__]
    if any(name not in instance.__dict__ for name in names):
        return None
    return repr([instance.__dict__[name] for name in names])


def _on_load(sender, instance, **kwargs) -> None:
    instance._placement_loaded = _placement_values(instance)  # as read (or as built)


def _on_topology(sender, instance, signal, **kwargs) -> None:
    from django.db.models.signals import post_save

    loaded = getattr(instance, "_placement_loaded", None)
    if (
        signal is post_save
        and not kwargs.get("created")
        and loaded is not None
        and loaded == _placement_values(instance)
    ):
        return  # saved as it was read: placements stand
    bump(PLACEMENT)
    if type(instance).__name__ in PLACEMENT_FIELDS:
        instance._placement_loaded = _placement_values(instance)


def _on_quota(sender, instance, **kwargs) -> None:
    bump(quotas_counter(instance.tenant_id))


def connect_signals() -> None:
    """Called from JobsConfig.ready: every process that changes these rows bumps."""
    from django.db.models.signals import post_delete, post_init, post_save

    from apps.compute.models import Cluster, Node, Partition
    from apps.quotas.models import Quota

    for model in (Partition, Node):
        post_init.connect(_on_load, sender=model, dispatch_uid=f"submit-cache-{model.__name__}")
    for model, receiver in (
        (Cluster, _on_topology),
        (Partition, _on_topology),
        (Node, _on_topology),
        (Quota, _on_quota),
    ):
        for signal in (post_save, post_delete):
            signal.connect(receiver, sender=model, dispatch_uid=f"submit-cache-{model.__name__}")
