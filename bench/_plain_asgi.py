"""The plain-HTTP peer of bench/datasets_transfer.py: a bare ASGI app on the same uvicorn,
no framework, no authentication, no database. `PUT /<name>` writes the body to
$PLAIN_ROOT/<name> as it arrives (with PLAIN_SHA256=1 it also computes the body's sha256 on
the way, as Torus does, and answers it); `GET /<name>` streams that file back in 1 MiB pieces."""

import hashlib
import os

ROOT = os.environ.get("PLAIN_ROOT", "/nonexistent")
CHUNK = 1024 * 1024
HASH = os.environ.get("PLAIN_SHA256") == "1"


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = os.path.join(ROOT, os.path.basename(scope["path"]))
    if scope["method"] == "PUT":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        digest = hashlib.sha256() if HASH else None
        try:
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                if body := message.get("body"):
                    os.write(fd, body)
                    if digest is not None:
                        digest.update(body)
                more = message.get("more_body", False)
        finally:
            os.close(fd)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        answer = digest.hexdigest().encode() if digest is not None else b"ok"
        await send({"type": "http.response.body", "body": answer})
        return
    size = os.path.getsize(path)
    headers = [(b"content-length", str(size).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
