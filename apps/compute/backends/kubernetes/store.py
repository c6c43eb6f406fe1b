"""The Kubernetes watcher's records in Redis, per cluster: what the backend's jobs() reads in
one round trip, written by the watcher (watch.py)."""

import json
import time

import redis
from django.conf import settings as django_settings

GONE_TTL = 7 * 24 * 3600
_redis: dict[str, redis.Redis] = {}


def redis_client() -> redis.Redis:
    url = django_settings.CACHES["default"]["LOCATION"]
    if url not in _redis:
        _redis[url] = redis.Redis.from_url(url, socket_timeout=5)
    return _redis[url]


class Store:
    """The watcher's output, per cluster, in Redis: live records (one hash), records of Jobs
    gone from the cluster (one key each, kept a week), lost nodes and a heartbeat."""

    def __init__(self, cluster_id):
        self.prefix = f"torus:k8s:{cluster_id}:"
        self.r = redis_client()

    def key(self, name: str) -> str:
        return self.prefix + name

    def write(
        self, *, changed: dict[str, dict], removed: set[str], gone: dict[str, dict], replace: bool
    ) -> None:
        pipe = self.r.pipeline(transaction=True)
        if replace:
            pipe.delete(self.key("jobs"))
        if changed:
            pipe.hset(self.key("jobs"), mapping={t: json.dumps(v) for t, v in changed.items()})
        if removed:
            pipe.hdel(self.key("jobs"), *removed)
        for tag, record in gone.items():
            pipe.set(self.key(f"gone:{tag}"), json.dumps(record), ex=GONE_TTL)
        pipe.execute()

    def heartbeat(self) -> None:
        self.r.set(self.key("heartbeat"), str(time.time()), ex=3600)

    def lost_nodes(self, nodes: dict[str, float]) -> None:
        if nodes:
            self.r.hset(self.key("lost-nodes"), mapping={n: str(t) for n, t in nodes.items()})

    def read(self, *, tag: str | None = None) -> tuple[dict[str, dict], float | None]:
        """The live records by tag (only `tag`'s, when given: one field, not the whole hash)
        and the last heartbeat."""
        pipe = self.r.pipeline(transaction=False)
        if tag is None:
            pipe.hgetall(self.key("jobs"))
        else:
            pipe.hmget(self.key("jobs"), [tag])
        pipe.get(self.key("heartbeat"))
        jobs, beat = pipe.execute()
        if tag is not None:
            jobs = {tag.encode(): jobs[0]} if jobs[0] is not None else {}
        records = {k.decode(): json.loads(v) for k, v in jobs.items()}
        return records, float(beat) if beat else None

    def gone(self, tags: set[str]) -> list[dict]:
        tags = sorted(tags)
        if not tags:
            return []
        values = self.r.mget([self.key(f"gone:{t}") for t in tags])
        return [json.loads(v) for v in values if v]

    def read_lost_nodes(self) -> dict[str, float]:
        return {k.decode(): float(v) for k, v in self.r.hgetall(self.key("lost-nodes")).items()}

    def clear(self) -> None:
        keys = list(self.r.scan_iter(match=self.prefix + "*"))
        if keys:
            self.r.delete(*keys)
