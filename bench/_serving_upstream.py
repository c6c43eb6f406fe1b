"""bench/serving.py's upstream clients: httpx's async streaming beside raw asyncio streams."""

import json
import time

from _common import percentiles
from _serving_engine import PROMPTS

# -- the gateway's upstream client: httpx's async streaming beside raw asyncio streams ------


async def _raw_stream(host: str, port: int, path: str, headers: dict, body: bytes, state: dict):
    """One streaming request on a kept-alive asyncio connection (HTTP/1.1, chunked answer):
    what the least a proxy in Python can do costs."""
    import asyncio

    started = time.perf_counter()
    if state.get("writer") is None:
        state["reader"], state["writer"] = await asyncio.open_connection(host, port)
    reader, writer = state["reader"], state["writer"]
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    writer.write(head.encode() + body)
    first = None
    header = await reader.readuntil(b"\r\n\r\n")
    assert header.startswith(b"HTTP/1.1 200"), header[:200]
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if first is None and size:
            first = time.perf_counter()
        if size == 0:
            break
    writer.close()  # llama-server closes a connection after a stream
    state["writer"] = None
    return started, first, time.perf_counter(), chunk


async def _httpx_stream(client, url: str, headers: dict, body: bytes):
    started = time.perf_counter()
    first = None
    async with client.stream("POST", url, content=body, headers=headers) as response:
        assert response.status_code == 200
        async for _ in response.aiter_raw():
            if first is None:
                first = time.perf_counter()
    return started, first, time.perf_counter(), None


def upstream_clients(port: int, api_key: str, *, requests: int, max_tokens: int) -> dict:
    """The same sequential streaming requests to the replica with each client; time to the
    first body bytes and this process's CPU per request."""
    import asyncio

    import httpx

    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    headers["Connection"] = "close"  # as the gateway asks for a stream
    body = json.dumps(
        {"prompt": PROMPTS[0], "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    ).encode()
    out = {}

    async def run(name: str) -> None:
        state: dict = {}
        async with httpx.AsyncClient(timeout=60) as client:
            url = f"http://127.0.0.1:{port}/v1/completions"
            took, cpu0 = [], time.process_time()
            for _ in range(requests):
                if name == "raw_asyncio":
                    got = await _raw_stream(
                        "127.0.0.1", port, "/v1/completions", headers, body, state
                    )
                else:
                    got = await _httpx_stream(client, url, headers, body)
                took.append(got)
            cpu = time.process_time() - cpu0
        if state.get("writer") is not None:
            state["writer"].close()
        out[name] = {
            "first_bytes_ms": percentiles([(f - s) * 1000 for s, f, _, _ in took]),
            "latency_ms": percentiles([(e - s) * 1000 for s, _, e, _ in took]),
            "client_cpu_ms_per_request": round(cpu * 1000 / requests, 3),
        }

    for name in ("httpx", "raw_asyncio", "httpx", "raw_asyncio"):  # the second pair counts
        asyncio.run(run(name))
    return out
