"""Where a gateway request goes: the deployment's route (cached per generation, published from
the database when missing), the replica with the fewest requests in flight (a Redis script
that also counts it in, and the release when it ends), replicas that failed skipped for a
while and reported, and the hold that wakes a deployment until a replica is ready (a failed
one is answered at once, with its reason)."""

import asyncio
import json
import logging
import time
import weakref

import redis.asyncio as aioredis
from django.conf import settings

from apps.serving import routes
from apps.serving.gateway import auth, db, upstream
from apps.serving.gateway.calls import Call
from apps.serving.gateway.errors import GatewayError

logger = logging.getLogger(__name__)

SUSPECT_S = 5.0  # a replica that failed is skipped by this process for this long


# KEYS[1]: the deployment's last-request key, KEYS[2..]: the candidates' in-flight counts;
# ARGV: expiry (s), now, a rotation for ties. Counts the chosen one in; returns its index.
PICK = """
local n, best, least = #KEYS - 1, nil, nil
for j = 0, n - 1 do
  local i = 2 + (j + tonumber(ARGV[3])) % n
  local v = tonumber(redis.call('GET', KEYS[i]) or '0')
  if least == nil or v < least then best, least = i, v end
end
redis.call('INCR', KEYS[best])
redis.call('EXPIRE', KEYS[best], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return best - 1
"""
# KEYS[1]: an in-flight count. Down by one, never below zero.
_RELEASE = """
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if v > 0 then return redis.call('DECR', KEYS[1]) end
return 0
"""


known_routes: dict[str, tuple[bytes, dict]] = {}  # deployment id -> (generation, route)
suspects: dict[str, float] = {}  # replica id -> until (monotonic)
_engine_keys: dict[str, str] = {}
_by_loop: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class Resources:
    """What belongs to one event loop: the async Redis client and the replicas' connections."""

    def __init__(self):
        self.redis = aioredis.Redis.from_url(routes.redis_url())
        self.upstream = upstream.Client()
        self.pick = self.redis.register_script(PICK)
        self.release = self.redis.register_script(_RELEASE)


def resources() -> Resources:
    loop = asyncio.get_running_loop()
    res = _by_loop.get(loop)
    if res is None:
        res = _by_loop[loop] = Resources()
    return res


def pick_keys(deployment_id: str, candidates: list[dict]) -> list[str]:
    return [routes.LAST.format(deployment_id)] + [
        routes.INFLIGHT.format(r["id"]) for r in candidates
    ]


def pick_args(call: Call) -> list:
    return [routes.INFLIGHT_TTL_S, repr(time.time()), int(call.at * 1000)]


async def pipeline(res: Resources, queries: list, pick_keys: list | None, call) -> list:
    async with res.redis.pipeline(transaction=False) as pipe:
        for command, arg in queries:
            getattr(pipe, command)(arg)
        if pick_keys:
            pipe.evalsha(res.pick.sha, len(pick_keys), *pick_keys, *pick_args(call))
        return await pipe.execute()


async def load_route(res: Resources, deployment_id: str, generation: bytes | None) -> dict:
    cached = known_routes.get(deployment_id)
    if generation is not None and cached is not None and cached[0] == generation:
        return cached[1]
    if generation is None:  # never published, or Redis emptied: from the database, once
        await db.once(("publish", deployment_id), routes.publish, deployment_id=deployment_id)
    raw, generation = await res.redis.mget(
        routes.ROUTE.format(deployment_id), routes.GENERATION.format(deployment_id)
    )
    if raw is None:
        return {"id": deployment_id, "missing": True}
    route = json.loads(raw)
    if len(known_routes) > 10000:
        known_routes.clear()
    known_routes[deployment_id] = (generation, route)
    return route


def usable(route: dict, tried: set) -> list[dict]:
    now = time.monotonic()
    return [
        r for r in route["replicas"] if r["id"] not in tried and suspects.get(r["id"], 0.0) < now
    ]


def engine_key_for(deployment_id: str) -> str:
    key = _engine_keys.get(deployment_id)
    if key is None:
        from apps.serving.keys import engine_key

        key = _engine_keys[deployment_id] = engine_key(deployment_id=deployment_id)
    return key


def report_replica(replica_id: str, reason: str) -> None:
    """Tell the platform (in a worker thread, not waited for) and skip it here meanwhile."""
    suspects[replica_id] = time.monotonic() + SUSPECT_S

    def report() -> None:
        from apps.serving import services

        try:
            services.report_replica_failure(replica_id=replica_id, reason=reason)
        except Exception:
            logger.exception("gateway: could not report replica %s", replica_id)

    task = asyncio.ensure_future(db.in_thread(report))
    _pending.add(task)
    task.add_done_callback(_pending.discard)


_pending: set = set()


async def hold(res: Resources, route: dict, tried: set) -> dict:
    """Wake the deployment and wait for a ready replica not tried yet, or 503."""
    from apps.serving import services

    limit = float(getattr(settings, "TORUS_SERVING_COLD_START_S", 180))
    deadline = time.monotonic() + limit
    next_wake = 0.0
    while True:
        now = time.monotonic()
        if now >= next_wake:
            await db.in_thread(services.wake, deployment_id=route["id"])
            next_wake = now + 15.0
        generation = await res.redis.get(routes.GENERATION.format(route["id"]))
        route = await load_route(res, route["id"], generation)
        if route.get("missing"):
            raise auth.not_found(route["id"])
        if route.get("state") == "FAILED":  # no replica will come: say why, now
            raise GatewayError(
                503,
                f"Deployment {route['name']} failed: {route.get('state_reason') or 'no reason'}",
                code="deployment_failed",
            )
        if usable(route, tried):
            return route
        if time.monotonic() >= deadline:
            raise GatewayError(
                503,
                f"No replica of this deployment became ready within {limit:.0f} s.",
                code="no_replica",
                headers=[(b"retry-after", b"30")],
            )
        await asyncio.sleep(0.05)  # a GET of the generation: cheap to ask often


async def finish(res, inflight_key: str, tpm_key: str | None, call: Call) -> None:
    """The request's count out of the replica; its tokens into the caller's bucket."""
    used = call.tokens_in + call.tokens_out if tpm_key else 0
    try:
        async with res.redis.pipeline(transaction=False) as pipe:
            pipe.evalsha(res.release.sha, 1, inflight_key)
            if used and call.route["limits"].get("tokens_per_minute"):
                pipe.incrby(tpm_key, used)
                pipe.expire(tpm_key, 120)
            await pipe.execute()
    except aioredis.ResponseError:  # the script not loaded (Redis emptied): plainly
        await res.release(keys=[inflight_key])
