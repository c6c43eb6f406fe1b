"""bench/serving.py's streaming clients: the paths, the rounds, their figures and ratios."""

import json
import threading
import time

from _common import percentiles
from _serving_engine import PROMPTS, log


class Target:
    """`fresh`: a new connection for each request (llama-server closes one after a stream, so
    a direct client reconnects each time; the gateway keeps its clients' connections)."""

    def __init__(self, name: str, port: int, path: str, token: str, *, fresh: bool = False):
        self.name, self.port, self.path, self.fresh = name, port, path, fresh
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


class Conn:
    """A blocking HTTP/1.1 client on one socket (TCP_NODELAY, one send per request, the
    chunked answer read as it comes): the same client for both paths, nothing buffered
    between the socket and the clock."""

    def __init__(self, port: int):
        self.port, self.sock = port, None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        return data

    def stream(self, target: "Target", body: bytes) -> dict:
        import socket

        started = time.perf_counter()
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = f"POST {target.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in target.headers.items())
        head += f"Content-Length: {len(body)}\r\n\r\n"
        self.sock.sendall(head.encode() + body)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self._recv()
        header, _, buf = buf.partition(b"\r\n\r\n")
        if not header.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{target.name}: {header[:200]!r}")
        if b"chunked" not in header.lower():
            raise RuntimeError(f"{target.name}: not a chunked stream: {header[:300]!r}")
        first, tokens, text, done = None, 0, b"", False
        while not done:
            while True:  # every complete chunk in the buffer
                eol = buf.find(b"\r\n")
                if eol < 0:
                    break
                size = int(buf[:eol].split(b";")[0], 16)
                if size == 0:
                    done = True
                    break
                if len(buf) < eol + 2 + size + 2:
                    break
                text += buf[eol + 2 : eol + 2 + size]
                buf = buf[eol + 2 + size + 2 :]
            events = text.split(b"\n\n")
            text = events.pop()  # an incomplete event waits for the rest
            for event in events:
                if not event.startswith(b"data: ") or event.startswith(b"data: [DONE]"):
                    continue
                if first is None:
                    first = time.perf_counter()
                if b'"text":""' not in event.replace(b" ", b""):
                    tokens += 1
            if not done:
                buf += self._recv()
        ended = time.perf_counter()
        if target.fresh:
            self.close()  # the server closes its end after a stream
        return {
            "ttft_ms": ((first or ended) - started) * 1000,
            "latency_ms": (ended - started) * 1000,
            "tokens": tokens,
        }


def run_round(target: Target, *, clients: int, requests: int, max_tokens: int) -> dict:
    """`requests` streaming completions from `clients` threads; wall time and per request."""
    results: list[dict] = []
    errors: list[str] = []
    counter = iter(range(requests))
    lock = threading.Lock()

    def client() -> None:
        conn = Conn(target.port)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            body = json.dumps(
                {
                    "prompt": PROMPTS[i % len(PROMPTS)],
                    "max_tokens": max_tokens,
                    "stream": True,
                    "ignore_eos": True,
                    "temperature": 0,
                }
            ).encode()
            try:
                results.append(conn.stream(target, body))
            except Exception as exc:  # recorded, the round goes on
                errors.append(f"{type(exc).__name__}: {exc}")
                conn.close()
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"wall_s": time.perf_counter() - started, "results": results, "errors": errors}


def measure(targets: list[Target], *, levels, requests: int, rounds: int, max_tokens: int) -> dict:
    out: dict = {}
    for clients in levels:
        per = {t.name: {"wall_s": 0.0, "results": [], "errors": []} for t in targets}
        for target in targets:  # warm-up: connections, the engine's first batches
            run_round(target, clients=clients, requests=clients, max_tokens=max_tokens)
        for r in range(rounds):
            order = targets if r % 2 == 0 else list(reversed(targets))
            for target in order:
                got = run_round(
                    target,
                    clients=clients,
                    requests=max(requests, 2 * clients),
                    max_tokens=max_tokens,
                )
                per[target.name]["wall_s"] += got["wall_s"]
                per[target.name]["results"] += got["results"]
                per[target.name]["errors"] += got["errors"]
        for name, got in per.items():
            tokens = sum(x["tokens"] for x in got["results"])
            out[f"{name}_c{clients}"] = {
                "requests": len(got["results"]),
                "errors": len(got["errors"]),
                "error_sample": got["errors"][:3],
                "tokens": tokens,
                "tokens_per_s": round(tokens / got["wall_s"], 1) if got["wall_s"] else 0,
                "ttft_ms": percentiles([x["ttft_ms"] for x in got["results"]]),
                "latency_ms": percentiles([x["latency_ms"] for x in got["results"]]),
            }
        for name, got in out.items():
            if name.endswith(f"_c{clients}"):
                log(
                    f"c={clients} {name.split('_c')[0]}: {got['tokens_per_s']} tok/s, ttft p50 "
                    f"{got['ttft_ms'].get('p50')}, lat p50 {got['latency_ms'].get('p50')} ms, "
                    f"errors {got['errors']}"
                )
                for sample in got["error_sample"]:
                    log(f"  error: {sample}")
    return out


def ratios(measured: dict, levels) -> dict:
    out = {}
    for clients in levels:
        d, g = measured[f"direct_c{clients}"], measured[f"gateway_c{clients}"]
        if not d["requests"] or not g["requests"]:
            continue
        out[f"c{clients}_throughput_gateway_vs_direct"] = round(
            g["tokens_per_s"] / d["tokens_per_s"], 3
        )
        for what in ("latency_ms", "ttft_ms"):
            for q in ("p50", "p95"):
                out[f"c{clients}_{what[:-3]}_{q}_gateway_vs_direct"] = round(
                    g[what][q] / d[what][q], 3
                )
        relay = measured.get(f"relay_c{clients}")
        if relay and relay["requests"]:
            for q in ("p50", "p95"):
                out[f"c{clients}_ttft_{q}_relay_vs_direct"] = round(
                    relay["ttft_ms"][q] / d["ttft_ms"][q], 3
                )
    return out
