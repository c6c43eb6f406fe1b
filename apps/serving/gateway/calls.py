"""One gateway request's facts (deployment, caller, replica, status, timings, tokens) and the
record written when it ends (apps/serving/records.py)."""

import time
from dataclasses import dataclass

from apps.serving import records
from apps.serving.gateway.auth import Caller


@dataclass
class Call:
    """One request's facts, recorded when it ends."""

    at: float
    started: float
    endpoint: str = ""
    route: dict | None = None
    caller: Caller | None = None
    replica_id: str | None = None
    status: int = 0
    error: str = ""
    stream: bool = False
    retried: bool = False
    ttft_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    started_response: bool = False
    picked: tuple | None = None  # (replica, its in-flight key) counted in, not yet sent


def record_call(call: Call) -> None:
    route = call.route
    if route is None or route.get("missing"):
        return
    caller = call.caller
    records.record(
        at=call.at,
        deployment_id=route["id"],
        replica_id=call.replica_id,
        user_id=caller.user_id if caller else None,
        key_id=caller.key_id if caller else None,
        path=call.endpoint,
        status=call.status,
        error=call.error,
        stream=call.stream,
        retried=call.retried,
        latency_ms=round((time.perf_counter() - call.started) * 1000, 3),
        ttft_ms=call.ttft_ms,
        tokens_in=call.tokens_in,
        tokens_out=call.tokens_out,
    )
