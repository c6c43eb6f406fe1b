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
import gc
import io
import re
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import HttpResponseBase
from django.urls import set_script_prefix, set_urlconf
from django.utils.log import log_response

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
    """A request body read from the ASGI channel as the view asks for it.

    A task on the event loop reads ahead, up to `ahead` bytes, into a buffer the view's thread
    takes from under a lock: receiving and writing overlap, and the two threads wake each other
    only when one has to wait (not once per piece: on a busy machine every wake-up costs a
    scheduling delay). A read returns `size` bytes (fewer only at the end); `read_parts` returns
    them as the pieces they came in, without copying."""

    def __init__(self, receive, *, ahead: int = 16 * 1024 * 1024):
        super().__init__()
        self._receive = receive
        self._ahead = ahead
        self._cond = threading.Condition()
        self._parts: deque[bytes] = deque()
        self._have = 0
        self._done = False
        self._interrupted = False
        self._want = 0  # bytes a waiting reader needs before it is woken
        self._room = asyncio.Event()
        self._room.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pump_task: asyncio.Task | None = None

    def readable(self) -> bool:
        return True

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._pump_task = self._loop.create_task(self._pump())

    async def stop(self) -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump_task

    async def _pump(self) -> None:
        try:
            while not self._done:
                await self._room.wait()
                message = await self._receive()
                with self._cond:
                    if message["type"] == "http.disconnect":
                        self._done = self._interrupted = True
                    else:
                        if body := message.get("body", b""):
                            self._parts.append(body)
                            self._have += len(body)
                        self._done = not message.get("more_body", False)
                        if self._have >= self._ahead:
                            self._room.clear()
                    if self._want and (self._have >= self._want or self._done):
                        self._cond.notify()
        finally:
            with self._cond:  # cancelled or failed: a waiting reader must not hang
                if not self._done:
                    self._done = self._interrupted = True
                self._cond.notify()

    def read_parts(self, size: int) -> list[bytes]:
        """Up to `size` bytes as the pieces they arrived in (no copy); [] at the end."""
        out, taken = [], 0
        with self._cond:
            while self._have < min(size, self._ahead) and not self._done:
                self._want = min(size, self._ahead)
                self._cond.wait()
            self._want = 0
            while self._parts and taken < size:
                part = self._parts.popleft()
                if taken + len(part) > size:
                    cut = size - taken
                    self._parts.appendleft(part[cut:])
                    part = part[:cut]
                out.append(part)
                taken += len(part)
            self._have -= taken
            if self._have < self._ahead and not self._room.is_set():
                self._loop.call_soon_threadsafe(self._room.set)
            if not taken and self._interrupted:
                raise BodyInterrupted("the client disconnected during the upload")
        return out

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            pieces = []
            while chunk := self.read(1024 * 1024):
                pieces.append(chunk)
            return b"".join(pieces)
        out = self.read_parts(size)
        return out[0] if len(out) == 1 else b"".join(out)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _RequestThreads:
    """Single-thread executors kept for the next request. Django's ASGIHandler enters a fresh
    ThreadSensitiveContext per request, whose executor starts a thread for that request and
    joins it at the end; here a request borrows a thread that stays."""

    def __init__(self, *, keep: int = 32):
        self._free: list[ThreadPoolExecutor] = []
        self._keep = keep

    def take(self) -> ThreadPoolExecutor:
        try:
            return self._free.pop()
        except IndexError:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="torus-request")

    def give(self, executor: ThreadPoolExecutor) -> None:
        if len(self._free) < self._keep:
            self._free.append(executor)
        else:
            executor.shutdown(wait=False)


class StreamingASGIHandler(ASGIHandler):
    """Django's ASGI handler, except that registered routes stream their request body,
    streamed responses go out in pieces of up to 1 MiB (Django's default is 64 KiB), and a
    request's synchronous work (the request_started signal, the middleware chain with the
    view, closing the response) runs in one call on a thread kept between requests."""

    chunk_size = 1024 * 1024

    def __init__(self):
        super().__init__()
        self._threads = _RequestThreads()
        self._frozen = False

    def _freeze(self) -> None:
        """After the first request: what the process has loaded (Django, the apps, the
        URLconf: ~150,000 objects) out of the garbage collector's sight. A full
        collection then took 20 ms instead of 140, a young one half as long (measured in
        process, 800 registry requests)."""
        self._frozen = True
        gc.collect()
        gc.freeze()

    def load_middleware(self, is_async=False):
        """The middleware chain and the view run synchronously, in one worker thread: one hop
        from the event loop per request. (Django's async chain wraps each hook of each
        MiddlewareMixin in its own sync_to_async and each sync-only one, as WhiteNoise's, in
        async_to_sync: about a dozen thread switches per request.)"""
        super().load_middleware(is_async=False)
        self._sync_chain = self._middleware_chain
        if is_async:
            self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self._threads.take()
        try:
            # thread-sensitive code of this request (the view, the ORM) runs on this thread
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self._threads.give(executor)
            if not self._frozen:
                self._freeze()

    async def handle(self, scope, receive, send):
        if streams_body(scope.get("path", ""), scope.get("method", "")):
            body = ReceiveBody(receive)
            body.start()
            try:
                await self._handle_streaming(scope, body, send)
            finally:
                await body.stop()
            return
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            set_script_prefix(get_script_prefix(scope))
            response = await sync_to_async(self._respond, thread_sensitive=True)(scope, body_file)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:  # the client went away meanwhile
                pass
            finally:
                if response.streaming:  # closed once its body has been sent
                    await sync_to_async(response.close, thread_sensitive=True)()
        finally:
            body_file.close()

    def _respond(self, scope, body_file) -> HttpResponseBase:
        """Django's request_started, request, middleware chain and view, and (unless the body
        is streamed) the response's close with request_finished: one thread hop. A view is not
        cancelled when its client disconnects (a synchronous one never could be)."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            set_urlconf(settings.ROOT_URLCONF)
            response = self._sync_chain(request)
            response._resource_closers.append(request.close)
            if response.status_code >= 400:
                log_response(
                    "%s: %s",
                    response.reason_phrase,
                    request.path,
                    response=response,
                    request=request,
                )
        if not response.streaming:
            response.close()  # its content is already bytes
        return response

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
