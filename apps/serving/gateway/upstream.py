"""HTTP/1.1 to the replicas on asyncio streams: one write per request, the answer's body
handed on as it arrives.

Measured against httpx's async client on the same streaming requests (bench/serving.py,
upstream_client): httpx spent 2.5x the CPU per request (10.4 against 4.1 ms for 64 events)
and its first bytes came later (p50 57 against 12 ms), which on a machine whose cores the
engine needs is throughput taken from the engine. A chunked answer is read in whatever pieces
the socket has, and every complete chunk in a piece is passed on in one send: events that
arrive together leave together.

Connections are kept per replica for answers with a length (llama-server closes a
connection after a stream, so streamed requests ask for `Connection: close`). What fails
before the status line raises Refused (nothing listens) or Broken (the connection died);
what fails later raises Broken from the body's iterator. A kept connection that fails before
the status line is Broken (the replica may have closed it meanwhile), a fresh one Refused.
"""

import asyncio
from collections.abc import AsyncIterator

CONNECT_TIMEOUT_S = 3.0
READ_SIZE = 65536
MAX_IDLE = 64  # kept connections per replica


class Refused(Exception):
    """Nothing accepted the connection."""


class Broken(Exception):
    """The connection ended or failed before the answer was whole."""


class Response:
    def __init__(self, pool, key, reader, writer, status: int, headers: list, reused: bool):
        self._pool, self._key, self._reader, self._writer = pool, key, reader, writer
        self.status, self.headers, self.reused = status, headers, reused
        self._reusable = False
        values = {name: value for name, value in headers}
        self._length = int(values[b"content-length"]) if b"content-length" in values else None
        self._chunked = b"chunked" in values.get(b"transfer-encoding", b"").lower()
        self._keep = b"close" not in values.get(b"connection", b"").lower()

    async def chunks(self) -> AsyncIterator[bytes]:
        reader = self._reader
        try:
            if self._length is not None:
                left = self._length
                while left > 0:
                    data = await reader.read(min(READ_SIZE, left))
                    if not data:
                        raise Broken("the replica closed the connection mid-answer")
                    left -= len(data)
                    yield data
                self._reusable = self._keep
            elif self._chunked:
                async for data in self._dechunk(reader):
                    yield data
            else:  # until the replica closes
                while data := await reader.read(READ_SIZE):
                    yield data
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            raise Broken(f"{type(exc).__name__}: {exc}") from None

    async def _dechunk(self, reader) -> AsyncIterator[bytes]:
        buf = bytearray()
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                raise Broken("the replica closed the connection mid-answer")
            buf += data
            out = bytearray()
            while True:
                eol = buf.find(b"\r\n")
                if eol < 0:
                    break
                try:
                    size = int(bytes(buf[:eol]).split(b";", 1)[0], 16)
                except ValueError:
                    raise Broken("a malformed chunk from the replica") from None
                if size == 0:  # the last chunk; no trailers expected
                    if out:
                        yield bytes(out)
                    self._reusable = self._keep and bytes(buf[eol + 2 :]) == b"\r\n"
                    return
                end = eol + 2 + size
                if len(buf) < end + 2:
                    break
                out += buf[eol + 2 : end]
                del buf[: end + 2]
            if out:
                yield bytes(out)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def close(self) -> None:
        """Back to the pool when the answer was read whole and may be followed, else shut."""
        if self._writer is None:
            return
        if self._reusable and not self._reader.at_eof():
            idle = self._pool.setdefault(self._key, [])
            if len(idle) < MAX_IDLE:
                idle.append((self._reader, self._writer))
                self._writer = None
                return
        self._writer.close()
        self._writer = None


class Client:
    """Kept connections per (host, port), for one event loop."""

    def __init__(self):
        self._idle: dict[tuple[str, int], list] = {}

    async def post(
        self, host: str, port: int, path: str, *, headers: dict, body: bytes, keep: bool
    ) -> Response:
        key = (host, port)
        reader = writer = None
        reused = False
        idle = self._idle.get(key) or []
        while keep and idle:
            reader, writer = idle.pop()
            if reader.at_eof() or writer.is_closing():
                writer.close()
                reader = writer = None
                continue
            reused = True
            break
        if writer is None:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), CONNECT_TIMEOUT_S
                )
            except (ConnectionRefusedError, TimeoutError) as exc:
                raise Refused(f"{type(exc).__name__}: {exc}") from None
            except OSError as exc:
                raise Refused(f"{type(exc).__name__}: {exc}") from None
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        if not keep:
            lines.append("Connection: close")
        try:
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            if len(body) > READ_SIZE:
                await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            writer.close()
            # a kept connection may have been closed by the replica meanwhile (Broken: try
            # a fresh one); a fresh one failing means the replica is gone (Refused)
            raise (Broken if reused else Refused)(f"{type(exc).__name__}: {exc}") from None
        except asyncio.LimitOverrunError:
            writer.close()
            raise Broken("the replica's answer headers are too large") from None
        status_line, *header_lines = head[:-4].split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            writer.close()
            raise Broken(f"not an HTTP answer: {status_line[:80]!r}")
        headers_out = []
        for line in header_lines:
            name, _, value = line.partition(b":")
            headers_out.append((name.strip().lower(), value.strip()))
        return Response(self._idle, key, reader, writer, int(parts[1]), headers_out, reused)

    def close(self) -> None:
        for idle in self._idle.values():
            for _, writer in idle:
                writer.close()
        self._idle.clear()
