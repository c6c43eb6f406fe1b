"""JSON the platform stores and can always write back.

PostgreSQL keeps a jsonb number as a `numeric` and gives it back without an exponent: a float
of 9.48e170 comes back as a 171-digit integer, which orjson (the API's renderer) refuses
("Integer exceeds 64-bit range"). So numbers taken into JSON columns are finite and within
MAX_NUMBER (`problem`), and what is stored without such a check (the audit log's changes) or
was stored before it is made safe to write (`renderable`)."""

import json
import math
from typing import Any

MAX_NUMBER = 10**15  # |x| of a number in a JSON value a client sends (metrics, params, config)
MAX_DEPTH = 8  # nested objects and arrays
INT64 = 2**63 - 1
MAX_TEXT = 4096  # a string kept by `renderable`


def problem(value: Any, *, max_depth: int = MAX_DEPTH, max_bytes: int = 64 * 1024) -> str:
    """'' when `value` (parsed JSON) nests at most `max_depth` deep, writes to at most
    `max_bytes` and every number in it is finite and within MAX_NUMBER; else the reason."""
    reason = _walk(value, depth=0, max_depth=max_depth)
    if reason:
        return reason
    if len(json.dumps(value, ensure_ascii=False).encode()) > max_bytes:
        return f"At most {max_bytes // 1024} KiB of JSON."
    return ""


def _walk(value: Any, *, depth: int, max_depth: int) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return ""
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return "Numbers must be finite."
        if abs(value) > MAX_NUMBER:
            return f"Numbers must be between -1e15 and 1e15, got {value:.6g}."
        return ""
    if isinstance(value, dict | list):
        if depth >= max_depth:
            return f"At most {max_depth} levels of nesting."
        items = value.values() if isinstance(value, dict) else value
        for item in items:
            reason = _walk(item, depth=depth + 1, max_depth=max_depth)
            if reason:
                return reason
        return ""
    return f"Not a JSON value: {type(value).__name__}."


def renderable(value: Any, *, depth: int = 0) -> Any:
    """`value` with what a JSON writer may refuse replaced: integers (and floats, which jsonb
    gives back as integers) beyond 64 bits as their text, NaN and infinities as null,
    strings over MAX_TEXT cut, nesting over MAX_DEPTH and anything not JSON as text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -INT64 - 1 <= value <= INT64 else str(value)
    if isinstance(value, float):  # jsonb gives a large float back as an integer
        if not math.isfinite(value):
            return None
        return value if abs(value) <= INT64 else repr(value)
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"
    if depth >= MAX_DEPTH:
        return renderable(str(value))
    if isinstance(value, dict):
        return {str(key): renderable(item, depth=depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [renderable(item, depth=depth + 1) for item in value]
    return renderable(str(value))
