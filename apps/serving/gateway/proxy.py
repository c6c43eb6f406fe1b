"""A checked request sent to a replica and its answer passed on: one try per replica (a stale
kept-alive connection tried once more, a refused or busy one skipped), the body streamed as
it arrives (server-sent events unbuffered), the usage read from its end."""

import asyncio
import contextlib
import json
import time

from apps.serving.gateway import routing, upstream
from apps.serving.gateway.calls import Call
from apps.serving.gateway.errors import engine_error_body, send_json

TAIL_BYTES = 16384  # of a stream, kept to read the usage at its end
KEEP_BODY = 4 * 1024 * 1024  # of a whole answer, kept to read its usage
HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"server", b"date"}


async def forward(call, res, route, body, receive, send, tpm_key) -> None:
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
        "authorization": f"Bearer {routing.engine_key_for(route['id'])}",
        "content-type": "application/json",
    }

    try:
        while True:
            candidates = routing.usable(route, tried)
            if not candidates:
                route = await routing.hold(res, route, tried)
                continue
            if call.picked is not None and call.picked[0] not in candidates:
                await routing.finish(res, call.picked[1], None, call)  # picked from an older route
                call.picked = None
            if call.picked is not None:
                (replica, inflight_key), call.picked = call.picked, None
            else:
                keys = routing.pick_keys(route["id"], candidates)
                index = int(await res.pick(keys=keys, args=routing.pick_args(call)))
                replica, inflight_key = candidates[index - 1], keys[index]
            try:
                outcome = await _attempt(call, res, replica, url_path, headers, body, send, gone)
            finally:
                await routing.finish(res, inflight_key, tpm_key, call)
            if outcome == "done":
                return
            # nothing was sent back: a stale kept-alive connection gets one fresh try on the
            # same replica, anything else moves on
            call.retried = True
            if outcome == "stale" and replica["id"] not in fresh_retry:
                fresh_retry.add(replica["id"])
                continue
            if outcome != "busy":
                routing.report_replica(replica["id"], f"gateway: {call.error}")
            tried.add(replica["id"])
    finally:
        watcher.cancel()


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
        routing.report_replica(replica["id"], f"gateway: {call.error}")
        raise  # the client sees a broken stream, not a clean end
    await send({"type": "http.response.body", "body": b""})
    _usage(call, bytes(kept), events)


def _usage(call: Call, kept: bytes, events: int) -> None:
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
