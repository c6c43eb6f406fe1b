"""The serving gateway's entry: the ASGI app for /serve/<deployment id>/v1/... in the portal's
process (path, caller, rate limit; then request.py checks, routing.py picks, proxy.py sends).

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

import logging
import math
import re
import time

import redis.asyncio as aioredis

from apps.serving import routes
from apps.serving.gateway import auth, routing
from apps.serving.gateway.calls import Call, record_call
from apps.serving.gateway.errors import GatewayError, send_error, send_json
from apps.serving.gateway.proxy import forward
from apps.serving.gateway.request import check_body, models_answer, read_body

logger = logging.getLogger(__name__)

PATH = re.compile(
    r"^/serve/(?P<id>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"(?P<endpoint>/v1/(?:completions|chat/completions|models))/?$"
)
TPM = "serving:tpm:{}:{}:{}"  # deployment, caller digest, minute


async def application(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    call = Call(at=time.time(), started=time.perf_counter())
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
        record_call(call)


async def _handle(call: Call, scope, receive, send) -> None:
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
    res = routing.resources()
    caller_digest = auth.digest(plaintext)
    entry = auth.cached_token(caller_digest) if plaintext.startswith(auth.TOKEN_PREFIX) else None
    tpm_key = TPM.format(deployment_id, caller_digest[:32], int(call.at // 60))
    # with the route cached and a caller seen before, the replica is picked in the same
    # round trip (its count given back if the route has moved on or the request is refused
    # before it is sent); a stranger's requests touch no count and no last-request time
    cached = routing.known_routes.get(deployment_id) if wanted == "POST" else None
    known = entry is not None or (cached is not None and caller_digest in cached[1].get("keys", {}))
    candidates = routing.usable(cached[1], set()) if cached is not None and known else []
    pick_keys = routing.pick_keys(deployment_id, candidates) if candidates else None
    queries = [
        ("get", routes.GENERATION.format(deployment_id)),
        ("get", tpm_key),
        ("mget", entry.keys if entry is not None else [tpm_key]),
    ]
    try:
        results = await routing.pipeline(res, queries, pick_keys, call)
    except aioredis.ResponseError:  # the script not loaded yet (a new Redis): pick later
        await res.redis.script_load(routing.PICK)
        pick_keys = None
        results = await routing.pipeline(res, queries, None, call)
    generation, used, counters, *picked = results
    if pick_keys:
        index = int(picked[0])
        call.picked = (candidates[index - 1], pick_keys[index])
        if cached[0] != generation:
            await routing.finish(res, call.picked[1], None, call)
            call.picked = None
    try:
        route = await routing.load_route(res, deployment_id, generation)
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
            await send_json(send, 200, models_answer(route))
            return
        body = await read_body(scope, receive, route["limits"]["max_request_bytes"])
        payload, call.stream = check_body(body, route, call.endpoint)
        if payload is not None:
            body = payload
        await forward(call, res, route, body, receive, send, tpm_key)
    finally:
        if call.picked is not None:  # refused before it was sent
            await routing.finish(res, call.picked[1], None, call)
