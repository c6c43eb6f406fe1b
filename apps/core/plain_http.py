"""The hot plain-HTTP API calls served by Django's WSGI handler from the ASGI application.

Django's ASGI handler runs a request's synchronous middleware and view in a thread started
for that request (asgiref's per-request context), reached from the event loop by several
hops that on a busy machine each wait to be scheduled. Here a request to one of ROUTES
whose body is announced and small (Content-Length at most TORUS_MAX_BODY_BYTES; a larger
one goes on to be refused as before) is read whole on the event loop and handed, once, to
Django's WSGI handler in one of TORUS_PLAIN_HTTP_THREADS threads (the WSGI servers' model:
the same middleware, views, signals and database pool); its answer comes back whole. Every
other request (uploads, downloads, streaming, unknown lengths, other routes) goes to
Django's ASGI handler as before; TORUS_PLAIN_HTTP_THREADS=0 sends everything there. The
benchmarks compare both in the same run (bench/README.md: submits with 8 client threads
finish their POSTs in about half the time; a single client's search is no faster).

The WSGI environ carries what Django's ASGIRequest puts in META: the same headers, joined the
same way, the client's address and the server's name and port."""

import asyncio
import io
import sys
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings

from config.env import env_int

# Routes whose answers are small JSON documents (method, path).
ROUTES = frozenset(
    {
        ("GET", "/api/v1/logs/search/"),
        ("GET", "/api/v1/logs/context/"),
        ("POST", "/api/v1/jobs/"),
        ("POST", "/api/v1/jobs/batch/"),
    }
)
THREADS = env_int("TORUS_PLAIN_HTTP_THREADS", 8, minimum=0)

_state: dict = {}


def takes(scope) -> bool:
    """Whether this request goes to the WSGI handler: a listed route, a known small body."""
    if not THREADS or (scope["method"], scope["path"]) not in ROUTES:
        return False
    length = None
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return False
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return False
            length = int(value)
    if length is None:
        return scope["method"] == "GET"
    return length <= settings.TORUS_MAX_BODY_BYTES


async def serve(scope, receive, send) -> None:
    """Answer a request that `takes()`: its body read, Django's WSGI handler run in a thread."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    if "pool" not in _state:
        from django.core.handlers.wsgi import WSGIHandler

        _state["handler"] = WSGIHandler()
        _state["pool"] = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="http")
    environ = _environ(scope, b"".join(chunks))
    loop = asyncio.get_running_loop()
    status, headers, body = await loop.run_in_executor(_state["pool"], _call, environ)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(k.encode("latin1"), v.encode("latin1")) for k, v in headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _call(environ: dict) -> tuple[int, list, bytes]:
    """The WSGI call, in a pool thread: the response read whole and closed (which sends
    request_finished, returning the thread's database connection to the pool)."""
    started: dict = {}
    parts: list[bytes] = []

    def start_response(status, headers, exc_info=None):
        started["status"], started["headers"] = status, headers
        return parts.append

    result = _state["handler"](environ, start_response)
    try:
        parts.extend(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return int(started["status"].split(" ", 1)[0]), started["headers"], b"".join(parts)


def _environ(scope, body: bytes) -> dict:
    server = scope.get("server") or ("unknown", "0")
    client = scope.get("client") or ("", 0)
    root = scope.get("root_path", "")
    path = scope["path"]
    if root and path.startswith(root):
        path = path[len(root) :]
    environ = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root.encode().decode("latin1"),
        "PATH_INFO": path.encode().decode("latin1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1] or "0"),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "REMOTE_ADDR": client[0] or "",
        "REMOTE_HOST": client[0] or "",
        "REMOTE_PORT": str(client[1] or 0),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if not client[0]:  # as ASGIRequest: no client, no REMOTE_* keys
        for key in ("REMOTE_ADDR", "REMOTE_HOST", "REMOTE_PORT"):
            del environ[key]
    for raw_name, raw_value in scope.get("headers", ()):  # ASGIRequest's rules
        name = raw_name.decode("latin1")
        if "_" in name:  # no spoofing through the '_' / '-' ambiguity
            continue
        if name == "content-length":
            key = "CONTENT_LENGTH"
        elif name == "content-type":
            key = "CONTENT_TYPE"
        else:
            key = "HTTP_" + name.upper().replace("-", "_")
        value = raw_value.decode("latin1")
        environ[key] = environ[key] + "," + value if key in environ else value
    return environ
