"""Per-request records of the gateway (ServingRequest), written in batches off the hot path,
and the usage they add up to (request rate, latency, tokens per minute) for charts.

The gateway hands each finished request to `record()` (a queue append); a thread of its own
writes what has queued every FLUSH_S seconds (at most BATCH rows an INSERT) and moves
Deployment.last_request_at forward. Records of a deployment deleted meanwhile are dropped (and
a deleted replica's reference cleared); with the database away a batch is dropped with a
warning: records are accounting, never a reason to fail or slow a request.
"""

import atexit
import logging
import queue
import threading
import time
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError, IntegrityError, close_old_connections, connection, transaction
from rest_framework.exceptions import ValidationError

logger = logging.getLogger(__name__)

FLUSH_S = 1.0
BATCH = 500
_queue: queue.SimpleQueue = queue.SimpleQueue()
_thread: threading.Thread | None = None
_lock = threading.Lock()
_flush_lock = threading.Lock()
FIELDS = (
    "deployment_id",
    "replica_id",
    "user_id",
    "key_id",
    "path",
    "status",
    "error",
    "stream",
    "retried",
    "latency_ms",
    "ttft_ms",
    "tokens_in",
    "tokens_out",
)


def record(**fields) -> None:
    """Queue one finished request (FIELDS, plus `at`: its start as a UNIX time)."""
    _queue.put(fields)
    if _thread is None:
        _start()


def _start() -> None:
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_run, name="serving-records", daemon=True)
            _thread.start()
            atexit.register(flush)


def _run() -> None:
    while True:
        time.sleep(FLUSH_S)
        try:
            flush()
        except Exception:  # keep the writer alive whatever one batch did
            logger.exception("serving records: a batch failed")


def flush() -> int:
    """Write every queued record now; returns how many were written."""
    written = 0
    with _flush_lock:
        close_old_connections()
        while True:
            batch = []
            while len(batch) < BATCH:
                try:
                    batch.append(_queue.get_nowait())
                except queue.Empty:
                    break
            if not batch:
                return written
            written += _write(batch)


def _write(batch: list[dict]) -> int:
    from apps.serving.models import Deployment, Replica, ServingRequest

    def rows() -> list:
        out = []
        for item in batch:
            values = {name: item.get(name) for name in FIELDS}
            values["error"] = (values["error"] or "")[:255]
            row = ServingRequest(**{k: v for k, v in values.items() if v is not None})
            row.created_at = datetime.fromtimestamp(item["at"], tz=UTC)
            out.append(row)
        return out

    for attempt in range(2):
        try:
            with transaction.atomic():
                ServingRequest.objects.bulk_create(rows())
                latest: dict = {}
                for item in batch:
                    key = item["deployment_id"]
                    latest[key] = max(latest.get(key, 0.0), item["at"])
                for deployment_id, at in latest.items():
                    when = datetime.fromtimestamp(at, tz=UTC)
                    Deployment.objects.filter(pk=deployment_id).exclude(
                        last_request_at__gte=when
                    ).update(last_request_at=when)
            return len(batch)
        except IntegrityError:
            if attempt:
                raise
            # a deployment or replica deleted meanwhile: keep the rest, without the replica
            alive = {
                str(pk)
                for pk in Deployment.objects.filter(
                    pk__in={item["deployment_id"] for item in batch}
                ).values_list("pk", flat=True)
            }
            replicas = {
                str(pk)
                for pk in Replica.objects.filter(
                    pk__in={item["replica_id"] for item in batch if item.get("replica_id")}
                ).values_list("pk", flat=True)
            }
            batch = [item for item in batch if str(item["deployment_id"]) in alive]
            for item in batch:
                if item.get("replica_id") and str(item["replica_id"]) not in replicas:
                    item["replica_id"] = None
            if not batch:
                return 0
        except DatabaseError as exc:
            logger.warning("serving records: %d dropped: %s", len(batch), exc)
            connection.close()
            return 0
    return 0


# -- usage, for charts --------------------------------------------------------------------

STEP_S = 60
MAX_MINUTES = 24 * 60


def usage(*, deployment_id, minutes: int = 60, now: datetime | None = None) -> dict:
    """Per-minute buckets of the last `minutes` (oldest first, empty minutes included):
    requests, errors (status >= 400), request rate, latency and time-to-first-token p50/p95,
    tokens in and out per minute; and the totals of the window."""
    now = now or datetime.now(tz=UTC)
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(minutes=minutes)
    sql = """
        SELECT date_trunc('minute', created_at) AS t,
               count(*),
               count(*) FILTER (WHERE status >= 400),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms),
               coalesce(sum(tokens_in), 0), coalesce(sum(tokens_out), 0)
          FROM serving_servingrequest
         WHERE deployment_id = %s AND created_at >= %s AND created_at < %s
         GROUP BY 1
    """
    totals_sql = """
        SELECT count(*), count(*) FILTER (WHERE status >= 400),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms),
               coalesce(sum(tokens_in), 0), coalesce(sum(tokens_out), 0)
          FROM serving_servingrequest
         WHERE deployment_id = %s AND created_at >= %s AND created_at < %s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [deployment_id, start, end])
        found = {row[0].astimezone(UTC): row[1:] for row in cursor.fetchall()}
        cursor.execute(totals_sql, [deployment_id, start, end])
        total = cursor.fetchone()

    def ms(value):
        return None if value is None else round(value, 2)

    series = []
    for i in range(minutes):
        t = start + timedelta(minutes=i)
        count, errors, p50, p95, t50, t95, tin, tout = found.get(
            t, (0, 0, None, None, None, None, 0, 0)
        )
        series.append(
            {
                "t": t.isoformat(),
                "requests": count,
                "errors": errors,
                "requests_per_s": round(count / STEP_S, 4),
                "latency_p50_ms": ms(p50),
                "latency_p95_ms": ms(p95),
                "ttft_p50_ms": ms(t50),
                "ttft_p95_ms": ms(t95),
                "tokens_in_per_min": int(tin),
                "tokens_out_per_min": int(tout),
            }
        )
    count, errors, p50, p95, t50, t95, tin, tout = total
    return {
        "deployment": str(deployment_id),
        "minutes": minutes,
        "step_s": STEP_S,
        "series": series,
        "totals": {
            "requests": count,
            "errors": errors,
            "requests_per_s": round(count / (minutes * 60), 4),
            "latency_p50_ms": ms(p50),
            "latency_p95_ms": ms(p95),
            "ttft_p50_ms": ms(t50),
            "ttft_p95_ms": ms(t95),
            "tokens_in": int(tin),
            "tokens_out": int(tout),
        },
    }


def usage_response(*, deployment, params) -> dict:
    """usage() for an API view: `minutes` from the query (1..1440, default 60), a 400 naming
    the field otherwise."""
    raw = params.get("minutes", "60")
    try:
        minutes = int(raw)
    except (TypeError, ValueError):
        raise ValidationError({"minutes": ["Must be a whole number of minutes."]}) from None
    if not 1 <= minutes <= MAX_MINUTES:
        raise ValidationError({"minutes": [f"Must be between 1 and {MAX_MINUTES}."]})
    return usage(deployment_id=deployment.pk, minutes=minutes)
