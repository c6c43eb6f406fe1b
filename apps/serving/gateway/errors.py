"""OpenAI-style error answers: {"error": {"message", "type", "code"}} with the HTTP status."""

import json

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "server_error",
    503: "server_error",
}


class GatewayError(Exception):
    """An answer the gateway gives itself; `param` names the request field at fault."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        param: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or []

    def body(self) -> bytes:
        error = {
            "message": self.message,
            "type": TYPES.get(self.status, "server_error"),
            "param": self.param,
            "code": self.code,
        }
        return json.dumps({"error": error}).encode()


async def send_json(send, status: int, body: bytes, headers=()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_error(send, error: GatewayError) -> None:
    headers = list(error.headers)
    if error.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send_json(send, error.status, error.body(), headers)


def engine_error_body(status: int, raw: bytes) -> bytes:
    """An engine's error answer in OpenAI's shape (llama-server's already is; anything else
    is wrapped)."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        error = parsed["error"]
        if "message" in error:
            error.setdefault("type", TYPES.get(status, "server_error"))
            return json.dumps({"error": error}).encode()
    message = raw.decode("utf-8", "replace").strip()[:500] or f"The engine answered {status}."
    return GatewayError(status, message, code="engine_error").body()
