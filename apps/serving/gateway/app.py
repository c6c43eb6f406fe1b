"""The serving gateway: an ASGI app for /serve/<deployment id>/v1/... in the portal's process.

A request costs one Redis round trip before it is sent (the route's generation, the caller's
token counters and its tokens-per-minute bucket, pipelined), one to pick the replica with the
fewest requests in flight (a script that also counts it in), and one when it ends. No SQL,
except when something is first seen or has changed (a token, a route): that runs in a worker
thread. The engine's answer is passed on as it arrives (server-sent events unbuffered); the
response to the client starts only with the engine's first body bytes, so a replica that
fails before sending anything (connection refused, reset) is reported and the request goes
to another one. With no ready replica the deployment is woken and the request held until
one is ready (settings.TORUS_SERVING_COLD_START_S) or answered 503.
"""

import asyncio
import contextlib
import json
import logging
import math
import re
import time
import weakref
from dataclasses import dataclass

import redis.asyncio as aioredis
from django.conf import settings

from apps.serving import records, routes
from apps.serving.gateway import auth, db, upstream
from apps.serving.gateway.errors import GatewayError, engine_error_body, send_error, send_json

logger = logging.getLogger(__name__)

PATH = re.compile(
    r"^/serve/(?P<id>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"(?P<endpoint>/v1/(?:completions|chat/completions|models))/?$"
)
TPM = "serving:tpm:{}:{}:{}"  # deployment, caller digest, minute
SUSPECT_S = 5.0  # a replica that failed is skipped by this process for this long
TAIL_BYTES = 16384  # of a stream, kept to read the usage at its end
KEEP_BODY = 4 * 1024 * 1024  # of a whole answer, kept to read its usage
HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"server", b"date"}

# KEYS[1]: the deployment's last-request key, KEYS[2..]: the candidates' in-flight counts;
# ARGV: expiry (s), now, a rotation for ties. Counts the chosen one in; returns its index.
_PICK = """
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

_routes: dict[str, tuple[bytes, dict]] = {}  # deployment id -> (generation, route)
_suspects: dict[str, float] = {}  # replica id -> until (monotonic)
_engine_keys: dict[str, str] = {}
_by_loop: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Resources:
    """What belongs to one event loop: the async Redis client and the replicas' connections."""

    def __init__(self):
        self.redis = aioredis.Redis.from_url(routes.redis_url())
        self.upstream = upstream.Client()
        self.pick = self.redis.register_script(_PICK)
        self.release = self.redis.register_script(_RELEASE)


def _resources() -> _Resources:
    loop = asyncio.get_running_loop()
    res = _by_loop.get(loop)
    if res is None:
        res = _by_loop[loop] = _Resources()
    return res


@dataclass
class _Call:
    """One request's facts, recorded when it ends."""

    at: float
    started: float
    endpoint: str = ""
    route: dict | None = None
    caller: auth.Caller | None = None
    replica_id: str | None = None
    status: int = 0
    error: str = ""
    stream: bool = False
    retried: bool = False
    ttft_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    started_response: bool = False
    picked: tuple | None = None  # (replica, its in-flight key) counted in, not yet sent


async def application(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    call = _Call(at=time.time(), started=time.perf_counter())
    try:
        await _handle(call, scope, receive, send)
    except GatewayError as exc:
        call.status, call.error = exc.status, exc.code
        if not call.started_response:
            await send_error(send, exc)
    except Exception as exc:
        if call.status < 400:  # (a replica that broke mid-answer has said 502 already)
            call.status, call.error = 500, f"{type(exc).__name__}: {exc}"[:255]
        if call.started_response:
            raise  # the client sees a broken answer, not a clean end
        logger.exception("gateway: %s %s", scope["method"], scope["path"])
        await send_error(
            send, GatewayError(500, "The gateway failed on this request.", code="internal_error")
        )
    finally:
        _record(call)


def _record(call: _Call) -> None:
    route = call.route
    if route is None or route.get("missing"):
        return
    caller = call.caller
    records.record(
        at=call.at,
        deployment_id=route["id"],
        replica_id=call.replica_id,
        user_id=caller.user_id if caller else None,
        key_id=caller.key_id if caller else None,
        path=call.endpoint,
        status=call.status,
        error=call.error,
        stream=call.stream,
        retried=call.retried,
        latency_ms=round((time.perf_counter() - call.started) * 1000, 3),
        ttft_ms=call.ttft_ms,
        tokens_in=call.tokens_in,
        tokens_out=call.tokens_out,
    )


async def _handle(call: _Call, scope, receive, send) -> None:
    match = PATH.match(scope["path"])
    if match is None:
        raise GatewayError(
            404,
            "Unknown path: use /serve/<deployment id>/v1/completions, /v1/chat/completions "
            "or /v1/models.",
            code="not_found",
        )
    deployment_id, call.endpoint = match["id"].lower(), match["endpoint"]
    method = scope["method"]
    wanted = "GET" if call.endpoint == "/v1/models" else "POST"
    if method != wanted:
        raise GatewayError(405, f"{call.endpoint} takes {wanted}.", code="method_not_allowed")
    plaintext = auth.bearer(scope["headers"])
    if not plaintext.startswith((auth.TOKEN_PREFIX, auth.KEY_PREFIX)):
        raise GatewayError(401, "Invalid token.", code="invalid_api_key")
    res = _resources()
    caller_digest = auth.digest(plaintext)
    entry = auth.cached_token(caller_digest) if plaintext.startswith(auth.TOKEN_PREFIX) else None
    tpm_key = TPM.format(deployment_id, caller_digest[:32], int(call.at // 60))
    # with the route cached and a caller seen before, the replica is picked in the same
    # round trip (its count given back if the route has moved on or the request is refused
    # before it is sent); a stranger's requests touch no count and no last-request time
    cached = _routes.get(deployment_id) if wanted == "POST" else None
    known = entry is not None or (cached is not None and caller_digest in cached[1].get("keys", {}))
    candidates = _usable(cached[1], set()) if cached is not None and known else []
    pick_keys = _pick_keys(deployment_id, candidates) if candidates else None
    queries = [
        ("get", routes.GENERATION.format(deployment_id)),
        ("get", tpm_key),
        ("mget", entry.keys if entry is not None else [tpm_key]),
    ]
    try:
        results = await _pipeline(res, queries, pick_keys, call)
    except aioredis.ResponseError:  # the script not loaded yet (a new Redis): pick later
        await res.redis.script_load(_PICK)
        pick_keys = None
        results = await _pipeline(res, queries, None, call)
    generation, used, counters, *picked = results
    if pick_keys:
        index = int(picked[0])
        call.picked = (candidates[index - 1], pick_keys[index])
        if cached[0] != generation:
            await _finish(res, call.picked[1], None, call)
            call.picked = None
    try:
        route = await _route(res, deployment_id, generation)
        if route.get("missing"):
            raise auth.not_found(deployment_id)
        if plaintext.startswith(auth.KEY_PREFIX):
            caller = await auth.key_caller(plaintext, route)
        elif entry is not None and auth.still_valid(entry, counters):
            caller = entry.caller
        else:
            caller = await auth.load_token(plaintext, ip=(scope.get("client") or (None,))[0])
        auth.authorize(caller, route, method=method)
        call.route, call.caller = route, caller  # recorded from here on
        limit = route["limits"].get("tokens_per_minute")
        if limit and used is not None and int(used) >= limit:
            retry = max(1, math.ceil(60 - call.at % 60))
            raise GatewayError(
                429,
                f"Rate limit reached: {limit} tokens per minute for this caller on this "
                f"deployment; retry in {retry} s.",
                code="rate_limit_exceeded",
                headers=[(b"retry-after", str(retry).encode())],
            )
        if call.endpoint == "/v1/models":
            call.status = 200
            await send_json(send, 200, _models(route))
            return
        body = await _read_body(scope, receive, route["limits"]["max_request_bytes"])
        payload, call.stream = _check(body, route, call.endpoint)
        if payload is not None:
            body = payload
        await _forward(call, res, route, body, receive, send, tpm_key)
    finally:
        if call.picked is not None:  # refused before it was sent
            await _finish(res, call.picked[1], None, call)


def _pick_keys(deployment_id: str, candidates: list[dict]) -> list[str]:
    return [routes.LAST.format(deployment_id)] + [
        routes.INFLIGHT.format(r["id"]) for r in candidates
    ]


def _pick_args(call: _Call) -> list:
    return [routes.INFLIGHT_TTL_S, repr(time.time()), int(call.at * 1000)]


async def _pipeline(res: _Resources, queries: list, pick_keys: list | None, call) -> list:
    async with res.redis.pipeline(transaction=False) as pipe:
        for command, arg in queries:
            getattr(pipe, command)(arg)
        if pick_keys:
            pipe.evalsha(res.pick.sha, len(pick_keys), *pick_keys, *_pick_args(call))
        return await pipe.execute()


async def _route(res: _Resources, deployment_id: str, generation: bytes | None) -> dict:
    cached = _routes.get(deployment_id)
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
    if len(_routes) > 10000:
        _routes.clear()
    _routes[deployment_id] = (generation, route)
    return route


def _models(route: dict) -> bytes:
    data = [
        {"id": name, "object": "model", "created": route["created"], "owned_by": route["name"]}
        for name in [route["name"], *(m for m in route["models"] if m != route["name"])]
    ]
    return json.dumps({"object": "list", "data": data}).encode()


async def _read_body(scope, receive, limit: int) -> bytes:
    too_big = GatewayError(
        413,
        f"Request body too large: this deployment takes at most {limit} bytes.",
        code="request_too_large",
    )
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise too_big
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise GatewayError(499, "The client went away.", code="client_closed")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_big
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def _check(body: bytes, route: dict, endpoint: str) -> tuple[bytes | None, bool]:
    """The request as the engine should get it (None: unchanged) and whether it streams; a
    400 naming the field for what the engine must not see."""
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise GatewayError(
            400, f"The request body is not valid JSON: {exc}.", code="invalid_json"
        ) from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "The request body must be a JSON object.", code="invalid_json")
    model = payload.get("model")
    if model is not None and model not in route["models"]:
        raise GatewayError(
            404,
            f"The model `{model}` does not exist on this deployment; it serves "
            f"{', '.join(route['models'])}.",
            code="model_not_found",
            param="model",
        )
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise GatewayError(
            400, "`stream` must be true or false.", code="invalid_value", param="stream"
        )
    field_name = "max_tokens"
    if endpoint == "/v1/chat/completions" and "max_completion_tokens" in payload:
        field_name = "max_completion_tokens"
    cap = route["limits"]["max_tokens"]
    asked = payload.get(field_name)
    if asked is None:
        payload[field_name] = cap
        return json.dumps(payload).encode(), stream
    if not isinstance(asked, int) or isinstance(asked, bool) or asked < 1:
        raise GatewayError(
            400,
            f"`{field_name}` must be a positive integer.",
            code="invalid_value",
            param=field_name,
        )
    if asked > cap:
        raise GatewayError(
            400,
            f"`{field_name}` is {asked}; this deployment allows at most {cap}.",
            code="invalid_value",
            param=field_name,
        )
    return None, stream


def _usable(route: dict, tried: set) -> list[dict]:
    now = time.monotonic()
    return [
        r for r in route["replicas"] if r["id"] not in tried and _suspects.get(r["id"], 0.0) < now
    ]


def _engine_key(deployment_id: str) -> str:
    key = _engine_keys.get(deployment_id)
    if key is None:
        from apps.serving.keys import engine_key

        key = _engine_keys[deployment_id] = engine_key(deployment_id=deployment_id)
    return key


def _report(replica_id: str, reason: str) -> None:
    """Tell the platform (in a worker thread, not waited for) and skip it here meanwhile."""
    _suspects[replica_id] = time.monotonic() + SUSPECT_S

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


async def _hold(res: _Resources, route: dict, tried: set) -> dict:
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
        route = await _route(res, route["id"], generation)
        if route.get("missing"):
            raise auth.not_found(route["id"])
        if _usable(route, tried):
            return route
        if time.monotonic() >= deadline:
            raise GatewayError(
                503,
                f"No replica of this deployment became ready within {limit:.0f} s.",
                code="no_replica",
                headers=[(b"retry-after", b"30")],
            )
        await asyncio.sleep(0.05)  # a GET of the generation: cheap to ask often


async def _forward(call, res, route, body, receive, send, tpm_key) -> None:
    tried: set = set()
    fresh_retry: set = set()
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.create_task(watch())
    url_path = call.endpoint
    headers = {
        "authorization": f"Bearer {_engine_key(route['id'])}",
        "content-type": "application/json",
    }

    try:
        while True:
            candidates = _usable(route, tried)
            if not candidates:
                route = await _hold(res, route, tried)
                continue
            if call.picked is not None and call.picked[0] not in candidates:
                await _finish(res, call.picked[1], None, call)  # picked from an older route
                call.picked = None
            if call.picked is not None:
                (replica, inflight_key), call.picked = call.picked, None
            else:
                keys = _pick_keys(route["id"], candidates)
                index = int(await res.pick(keys=keys, args=_pick_args(call)))
                replica, inflight_key = candidates[index - 1], keys[index]
            try:
                outcome = await _attempt(call, res, replica, url_path, headers, body, send, gone)
            finally:
                await _finish(res, inflight_key, tpm_key, call)
            if outcome == "done":
                return
            # nothing was sent back: a stale kept-alive connection gets one fresh try on the
            # same replica, anything else moves on
            call.retried = True
            if outcome == "stale" and replica["id"] not in fresh_retry:
                fresh_retry.add(replica["id"])
                continue
            if outcome != "busy":
                _report(replica["id"], f"gateway: {call.error}")
            tried.add(replica["id"])
    finally:
        watcher.cancel()


async def _finish(res, inflight_key: str, tpm_key: str | None, call: _Call) -> None:
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


async def _attempt(call, res, replica, url_path, headers, body, send, gone) -> str:
    """One try on one replica: "done" (answered, whatever the status), or why nothing was
    sent back: "stale" (a kept connection reset), "down" (refused, reset), "busy" (503)."""
    try:
        # llama-server closes a connection after a stream: only other answers keep theirs
        response = await res.upstream.post(
            replica["host"],
            replica["port"],
            url_path,
            headers=headers,
            body=body,
            keep=not call.stream,
        )
    except upstream.Refused as exc:
        call.error = f"replica {replica['id']} refused: {exc}"[:255]
        return "down"
    except upstream.Broken as exc:
        call.error = f"replica {replica['id']} reset: {exc}"[:255]
        return "stale"
    call.replica_id = replica["id"]
    try:
        if response.status == 503:
            with contextlib.suppress(upstream.Broken):
                await response.read()
            call.error = "replica busy (503)"
            return "busy"
        if response.status >= 400:
            try:
                raw = await response.read()
            except upstream.Broken as exc:
                call.error = f"replica {replica['id']} failed before answering: {exc}"[:255]
                return "stale" if response.reused else "down"
            call.status, call.error = response.status, raw.decode("utf-8", "replace")[:255]
            call.started_response = True
            await send_json(send, response.status, engine_error_body(response.status, raw))
            return "done"
        chunks = response.chunks()
        try:
            first = await chunks.__anext__()
        except StopAsyncIteration:
            first = b""
        except upstream.Broken as exc:
            call.error = f"replica {replica['id']} failed before answering: {exc}"[:255]
            return "stale" if response.reused else "down"
        await _relay(call, response, replica, first, chunks, send, gone)
        return "done"
    finally:
        response.close()


async def _relay(call, response, replica, first: bytes, chunks, send, gone) -> None:
    out = [(k, v) for k, v in response.headers if k not in HOP]
    out.append((b"x-torus-replica", replica["id"].encode()))
    call.status = response.status
    call.started_response = True
    await send({"type": "http.response.start", "status": response.status, "headers": out})
    call.ttft_ms = round((time.perf_counter() - call.started) * 1000, 3)
    kept = bytearray(first)
    events = first.count(b"data: ")
    if first:
        await send({"type": "http.response.body", "body": first, "more_body": True})
    try:
        async for chunk in chunks:
            if gone.is_set():
                call.status, call.error = 499, "the client went away"
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if call.stream:
                events += chunk.count(b"data: ")
                kept += chunk
                if len(kept) > TAIL_BYTES:
                    del kept[: len(kept) - TAIL_BYTES]
            elif len(kept) < KEEP_BODY:
                kept += chunk
    except upstream.Broken as exc:
        call.status, call.error = 502, f"replica {replica['id']} failed mid-answer: {exc}"[:255]
        _report(replica["id"], f"gateway: {call.error}")
        raise  # the client sees a broken stream, not a clean end
    await send({"type": "http.response.body", "body": b""})
    _usage(call, bytes(kept), events)


def _usage(call: _Call, kept: bytes, events: int) -> None:
    """Tokens in and out from the engine's `usage` (or llama.cpp's `timings`)."""
    found = None
    if call.stream:
        for line in reversed(kept.split(b"\n")):
            if line.startswith(b"data: {") and (b'"usage"' in line or b'"timings"' in line):
                with contextlib.suppress(ValueError):
                    found = json.loads(line[6:])
                    break
    else:
        with contextlib.suppress(ValueError):
            found = json.loads(kept)
    if isinstance(found, dict):
        usage = found.get("usage") or {}
        timings = found.get("timings") or {}
        call.tokens_in = int(usage.get("prompt_tokens") or timings.get("prompt_n") or 0)
        call.tokens_out = int(usage.get("completion_tokens") or timings.get("predicted_n") or 0)
    if call.stream and not call.tokens_out:
        call.tokens_out = max(0, events - 1)  # one event per token, less [DONE]
