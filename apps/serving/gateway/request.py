"""What a gateway request may ask: its body read within the deployment's size limit and
checked (JSON, a model the deployment serves, `stream`, `max_tokens` capped), and the
/v1/models answer."""

import json

from apps.serving.gateway.errors import GatewayError


def models_answer(route: dict) -> bytes:
    data = [
        {"id": name, "object": "model", "created": route["created"], "owned_by": route["name"]}
        for name in [route["name"], *(m for m in route["models"] if m != route["name"])]
    ]
    return json.dumps({"object": "list", "data": data}).encode()


async def read_body(scope, receive, limit: int) -> bytes:
    too_big = GatewayError(
        413,
        f"Request body too large: this deployment takes at most {limit} bytes.",
        code="request_too_large",
    )
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise too_big
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise GatewayError(499, "The client went away.", code="client_closed")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_big
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def check_body(body: bytes, route: dict, endpoint: str) -> tuple[bytes | None, bool]:
    """The request as the engine should get it (None: unchanged) and whether it streams; a
    400 naming the field for what the engine must not see."""
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise GatewayError(
            400, f"The request body is not valid JSON: {exc}.", code="invalid_json"
        ) from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "The request body must be a JSON object.", code="invalid_json")
    model = payload.get("model")
    if model is not None and model not in route["models"]:
        raise GatewayError(
            404,
            f"The model `{model}` does not exist on this deployment; it serves "
            f"{', '.join(route['models'])}.",
            code="model_not_found",
            param="model",
        )
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise GatewayError(
            400, "`stream` must be true or false.", code="invalid_value", param="stream"
        )
    field_name = "max_tokens"
    if endpoint == "/v1/chat/completions" and "max_completion_tokens" in payload:
        field_name = "max_completion_tokens"
    cap = route["limits"]["max_tokens"]
    asked = payload.get(field_name)
    if asked is None:
        payload[field_name] = cap
        return json.dumps(payload).encode(), stream
    if not isinstance(asked, int) or isinstance(asked, bool) or asked < 1:
        raise GatewayError(
            400,
            f"`{field_name}` must be a positive integer.",
            code="invalid_value",
            param=field_name,
        )
    if asked > cap:
        raise GatewayError(
            400,
            f"`{field_name}` is {asked}; this deployment allows at most {cap}.",
            code="invalid_value",
            param=field_name,
        )
    return None, stream
