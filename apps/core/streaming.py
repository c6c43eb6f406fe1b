"""Request bodies that stream to the view, and responses that stream from it, under ASGI.

Django's ASGI handler reads a whole request body (into a temporary file that spills to disk)
before any view runs, and consumes a synchronous streaming response into a list. Neither is
acceptable for multi-gigabyte dataset files, so:

- routes registered with `register_streaming_body` (a path regex and a method) get their body
  as a file-like object fed from the ASGI `receive` channel by a task that reads a bounded
  amount ahead: the view (running in its request thread) reads it in bounded pieces while
  uvicorn's flow control holds the client back; nothing is spooled. The body-size guard does
  not apply to them.
- `async_chunks` turns a synchronous iterator of bytes into an asynchronous one that reads
  each piece in a worker thread, for StreamingHttpResponse under ASGI.
"""

import asyncio
import contextlib
import io
import re
from collections import deque
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import async_to_sync, sync_to_async
from django.core import signals
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.urls import set_script_prefix

_STREAMING: list[tuple[re.Pattern, frozenset[str]]] = []


def register_streaming_body(pattern: str, *, methods: tuple[str, ...]) -> None:
    compiled = re.compile(pattern)
    if all(existing.pattern != pattern for existing, _ in _STREAMING):
        _STREAMING.append((compiled, frozenset(methods)))


def streams_body(path: str, method: str) -> bool:
    return any(rx.match(path) and method in methods for rx, methods in _STREAMING)


class BodyInterrupted(Exception):
    """The client went away before sending the whole body."""


class ReceiveBody(io.RawIOBase):
    """A request body read from the ASGI channel as the view asks for it. A task on the event
    loop reads ahead (at most `ahead` messages) while the view, in its thread, writes what it
    has, so receiving and writing overlap. A read returns at most `size` bytes (fewer only at
    the end); each byte is copied once, when the received pieces are joined."""

    def __init__(self, receive, *, ahead: int = 32):
        super().__init__()
        self._receive = receive
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=ahead)
        self._parts: deque[bytes] = deque()
        self._have = 0
        self._done = False
        self._pump_task: asyncio.Task | None = None

    def readable(self) -> bool:
        return True

    def start(self) -> None:
        self._pump_task = asyncio.get_running_loop().create_task(self._pump())

    async def stop(self) -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump_task

    async def _pump(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                await self._queue.put(None)
                return
            more = message.get("more_body", False)
            await self._queue.put((message.get("body", b""), more))
            if not more:
                return

    async def _pull(self, size: int) -> None:
        while self._have < size and not self._done:
            item = await self._queue.get()
            if item is None:
                self._done = True
                raise BodyInterrupted("the client disconnected during the upload")
            body, more = item
            if body:
                self._parts.append(body)
                self._have += len(body)
            if not more:
                self._done = True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            pieces = []
            while chunk := self.read(1024 * 1024):
                pieces.append(chunk)
            return b"".join(pieces)
        if self._have < size and not self._done:
            async_to_sync(self._pull)(size)
        out, taken = [], 0
        while self._parts and taken < size:
            part = self._parts.popleft()
            if taken + len(part) > size:
                cut = size - taken
                self._parts.appendleft(part[cut:])
                part = part[:cut]
            out.append(part)
            taken += len(part)
        self._have -= taken
        return out[0] if len(out) == 1 else b"".join(out)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class StreamingASGIHandler(ASGIHandler):
    """Django's ASGI handler, except that registered routes stream their request body, and
    streamed responses go out in pieces of up to 1 MiB (Django's default is 64 KiB)."""

    chunk_size = 1024 * 1024

    async def handle(self, scope, receive, send):
        if not streams_body(scope.get("path", ""), scope.get("method", "")):
            return await super().handle(scope, receive, send)
        body = ReceiveBody(receive)
        body.start()
        try:
            await self._handle_streaming(scope, body, send)
        finally:
            await body.stop()

    async def _handle_streaming(self, scope, body: ReceiveBody, send) -> None:
        set_script_prefix(get_script_prefix(scope))
        await signals.request_started.asend(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body)
        if request is None:
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return
        response = await self.run_get_response(request)
        with contextlib.suppress(asyncio.CancelledError):  # the client went away meanwhile
            await self.send_response(response, send)
        await sync_to_async(response.close)()


async def async_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Each piece of a blocking iterator, produced in a worker thread."""
    step = sync_to_async(next, thread_sensitive=False)
    try:
        while (chunk := await step(chunks, None)) is not None:
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            await sync_to_async(close, thread_sensitive=False)()
