"""Following a job live over its websocket (/ws/jobs/{id}/): the messages, and the lines of
one job until it has ended and its output is fully shipped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import urlsplit

from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import connect

from torus.errors import TorusError

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}

# The server's close codes (docs/logs.md): (HTTP-like status, error code, what to tell the user).
CLOSE_CODES = {
    4401: (
        401,
        "not_authenticated",
        "your credentials are no longer valid (token revoked or "
        "expired, or signed out): the live view was closed",
    ),
    4403: (
        403,
        "permission_denied",
        "you are no longer allowed to see this job (membership "
        "or role changed): the live view was closed",
    ),
    4404: (404, "not_found", "no such job"),
}


def websocket_url(base_url: str, path: str) -> tuple[str, str]:
    """(ws:// or wss:// URL of `path`, the Origin to send) for an http(s) base URL."""
    parts = urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme)
    if scheme is None:
        raise TorusError(f"cannot open a websocket to {base_url}: not an http(s) URL")
    return f"{scheme}://{parts.netloc}{path}", f"{parts.scheme}://{parts.netloc}"


def messages(
    base_url: str, path: str, *, token: str | None, heartbeat: float | None = None
) -> Iterator[dict]:
    """Every JSON message of a websocket until the server closes it; with `heartbeat`, a
    {"type": "idle"} whenever nothing has arrived for that many seconds."""
    url, origin = websocket_url(base_url, path)
    headers = {"User-Agent": "torus-sdk"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with connect(url, origin=origin, additional_headers=headers, open_timeout=15) as ws:
            while True:
                try:
                    raw = ws.recv(timeout=heartbeat)
                except TimeoutError:
                    yield {"type": "idle"}
                    continue
                except ConnectionClosed as exc:
                    code = exc.rcvd.code if exc.rcvd is not None else None
                    if code in CLOSE_CODES:
                        status, error, text = CLOSE_CODES[code]
                        raise TorusError(text, status=status, code=error) from None
                    return
                yield json.loads(raw)
    except InvalidStatus as exc:
        status = exc.response.status_code
        message = f"the live view refused the connection (HTTP {status})"
        raise TorusError(message, status=status) from None
    except (OSError, WebSocketException) as exc:
        raise TorusError(f"cannot reach the live view at {url}: {exc}") from exc


class Follower:
    """Turns a job's messages into its lines, and knows when nothing more will come: the job
    is in a final state and its latest attempt's followed streams are shipped to the end."""

    def __init__(self, *, streams: set[str]):
        self.streams = streams
        self.state = ""
        self.attempt = 0
        self.ended: set[tuple[int, str]] = set()  # (attempt, stream) fully shipped
        self.backlog_keys: set[tuple] = set()
        self.skipped = 0

    def feed(self, message: dict) -> list[dict]:
        """The new lines a message carries (after the backlog, lines it already held are
        dropped: the server may send those twice, never not at all)."""
        kind = message.get("type")
        if kind == "backlog":
            self.state = message["state"]
            streams = message.get("streams") or {}
            if streams.get("attempt"):
                self._attempt(streams["attempt"])
                self.ended |= {(self.attempt, s) for s in ("stdout", "stderr") if streams.get(s)}
            lines = self._wanted(message["lines"])
            self.backlog_keys = {_key(line) for line in lines}
            return lines
        if kind == "lines":
            return [
                line
                for line in self._wanted(message["lines"])
                if _key(line) not in self.backlog_keys
            ]
        if kind == "state":
            self.state = message["state"]
            if message.get("attempt"):
                self._attempt(message["attempt"])
        elif kind == "stream_end":
            self._attempt(message["attempt"])
            self.ended.add((message["attempt"], message["stream"]))
        elif kind == "skipped":
            self.skipped += message["count"]
        return []

    @property
    def done(self) -> bool:
        if self.state not in TERMINAL:
            return False
        return not self.attempt or all((self.attempt, s) in self.ended for s in self.streams)

    def _attempt(self, number: int) -> None:
        self.attempt = max(self.attempt, number)

    def _wanted(self, lines: list[dict]) -> list[dict]:
        for line in lines:
            self._attempt(line.get("attempt_number") or 0)
        return [line for line in lines if line.get("stream") in self.streams]


def _key(line: dict) -> tuple:
    return (line.get("attempt_number"), line.get("stream"), line.get("offset"))
