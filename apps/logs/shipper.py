"""The log shipper: tails every active attempt's stdout and stderr into Elasticsearch, read
through its cluster's log source (apps/logs/sources.py: files for Slurm, the pod log API for
Kubernetes).

Exactly once in effect: each event's document id is (attempt, stream, byte offset), so a
re-sent batch overwrites itself; a stream's offset is stored only after Elasticsearch has
acknowledged the batch. A shipper killed anywhere re-reads from the stored offset. Memory is
bounded by the read size whatever the backlog. Several shippers split the attempts between
them by shards held by leases (apps/logs/shards.py); a dead one's shards pass to the others.
"""

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, close_old_connections
from django.utils import timezone
from elasticsearch import ApiError, TransportError, helpers
from redis.exceptions import RedisError

from apps.compute.backends.base import ClusterUnavailable
from apps.core.generations import redis_client
from apps.core.passes import Pass
from apps.jobs.models import ATTEMPT_ENDED, JobAttempt
from apps.logs import telemetry
from apps.logs.es import client, index_name
from apps.logs.idleness import HEARTBEAT, heartbeats_record
from apps.logs.index import template_install
from apps.logs.live import publish_lines, publish_metrics, publish_stream_end
from apps.logs.metrics import Point, parse_metric_line, points_store
from apps.logs.models import LogCursor
from apps.logs.parsing import events
from apps.logs.search_backlog import to_line
from apps.logs.shards import ShardLeases
from apps.logs.signatures import scan_pending
from apps.logs.sources import log_ref, source_for
from apps.secrets.mask import masker_for

logger = logging.getLogger(__name__)
STREAMS = ("stdout", "stderr")
# The shipper's failures (apps/core/passes.py), one item per stream (attempt:stream): a stream
# that cannot be read or shipped (its file unreadable, replaced by a directory) is PARKED: tried
# again after PARK_SECONDS, doubled each failure up to PARK_MAX_SECONDS, from its stored offset
# (nothing is lost); the other streams ship meanwhile.
PASS = Pass("shipper")
PARK_SECONDS, PARK_MAX_SECONDS = 1.0, 60.0


@dataclass
class PassStats:
    documents: int = 0
    streams: int = 0
    behind: int = 0  # streams not read to their end in this pass (parked, unavailable, long)


def _active_attempts(*, shards: ShardLeases | None):
    """(attempt, stream, its cursor or None) for the streams whose output may still grow or
    is not fully shipped yet, of the shards this shipper holds (all of them without
    `shards`); a partial index keeps this one short query however many attempts have
    finished, and one more reads every cursor of them."""
    recent = timezone.now() - timedelta(hours=settings.TORUS_SHIPPER_RECENT_HOURS)
    attempts = list(
        JobAttempt.objects.filter(logs_shipped=False, created_at__gte=recent)
        .exclude(stdout_path="")
        .select_related("job__tenant", "job__cluster")
        .order_by()
    )
    cursors = {(c.attempt_id, c.stream): c for c in LogCursor.objects.filter(attempt__in=attempts)}
    done = {key for key, cursor in cursors.items() if cursor.complete}
    # Both streams complete but the attempt not marked: a shipper SIGKILLed between the last
    # cursor and the mark (_stream_shipped). Nothing is left to ship; mark it, or every pass
    # would list it for ever and nothing would say its logs are all in.
    finished = {pk for pk, _ in done if all((pk, stream) in done for stream in STREAMS)}
    if finished:
        JobAttempt.objects.filter(pk__in=finished).update(logs_shipped=True)
    for attempt in attempts:
        if shards is not None and not (shards.refresh() and shards.owns(attempt.pk)):
            continue  # (refresh: a long pass keeps its leases, and drops those it lost)
        for stream in STREAMS:
            if (attempt.pk, stream) not in done:
                yield attempt, stream, cursors.get((attempt.pk, stream))


def ship_stream(attempt: JobAttempt, stream: str, *, cursor: LogCursor | None = None) -> int:
    """Ship what is new in one stream; the number of documents acknowledged. `cursor`: the
    stream's, as the pass read it (else read or made here)."""
    if cursor is None:
        cursor, _ = LogCursor.objects.get_or_create(attempt=attempt, stream=stream)
    if cursor.complete:
        return 0
    ended = attempt.state in ATTEMPT_ENDED
    read = settings.TORUS_SHIPPER_READ_BYTES
    data = source_for(attempt=attempt).read(
        ref=log_ref(attempt=attempt, stream=stream), offset=cursor.offset, limit=read + 1
    )  # one byte more: whether this read reaches the end
    if data is None:  # no such stream (yet, or any more)
        if ended:
            LogCursor.objects.filter(pk=cursor.pk).update(complete=True)
            _stream_shipped(attempt, stream)
        return 0
    at_eof, data = len(data) <= read, data[:read]
    base, skipping = cursor.offset, cursor.skipping
    if skipping:  # the rest of an over-long line, already shipped truncated
        newline = data.find(b"\n")
        if newline < 0:
            _advance(cursor, offset=base + len(data), skipping=True, lines=0)
            return 0
        data, base, skipping = data[newline + 1 :], base + newline + 1, False
    final = ended and at_eof
    found, consumed = events(data, base, final=final, max_line=settings.TORUS_LOG_MAX_LINE)
    if not found and len(data) >= settings.TORUS_SHIPPER_READ_BYTES:
        # one line longer than a whole read: ship its head, then skip to its end
        found, _ = events(
            data[: settings.TORUS_LOG_MAX_LINE + 1] + b"\n",
            base,
            final=True,
            max_line=settings.TORUS_LOG_MAX_LINE,
        )
        consumed, skipping = base + len(data), True
    if found and (masker := masker_for(attempt)):  # the job's secrets, as ***
        for event in found:
            event.text = masker.text(event.text, cut=event.truncated)
    if found:
        _bulk(attempt, stream, found)
    complete = final and consumed >= base + len(data) and not skipping
    if not _advance(
        cursor, offset=consumed, skipping=skipping, lines=len(found), complete=complete
    ):
        return 0
    if complete:
        _stream_shipped(attempt, stream)
    return len(found)


def _stream_shipped(attempt: JobAttempt, stream: str) -> None:
    """A stream is complete: tell live viewers; once both are, the shipper forgets the attempt."""
    if LogCursor.objects.filter(attempt=attempt, complete=True).count() == len(STREAMS):
        JobAttempt.objects.filter(pk=attempt.pk).update(logs_shipped=True)
    publish_stream_end(job_id=attempt.job_id, attempt_number=attempt.number, stream=stream)


def _bulk(attempt: JobAttempt, stream: str, found) -> None:
    """Index the events; returns once Elasticsearch has acknowledged every one of them.

    The bulk body is written here (one JSON encoding per document, the action line by hand)
    and sent in requests of TORUS_SHIPPER_BULK_DOCS documents by one sender thread, so the
    next request is encoded while Elasticsearch indexes the previous one."""
    job = attempt.job
    now = datetime.now(UTC)
    now_text = now.isoformat()
    fixed = {
        "tenant": str(job.tenant_id),
        "project": str(job.project_id),
        "job": str(job.id),
        "attempt": str(attempt.id),
        "attempt_number": attempt.number,
        "stream": stream,
        "node": attempt.nodes[0] if attempt.nodes else "",
    }
    id_prefix = f"{attempt.id}:{stream}:"
    indices: dict[int, str] = {}  # UTC day (ordinal) -> index name
    docs, body, sent = [], [], []
    for event in found:
        stamp, text = event.timestamp, now_text
        if stamp is None:
            stamp = now
        else:
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=UTC)
            text = stamp.isoformat()
            if stamp.tzinfo is not UTC:
                stamp = stamp.astimezone(UTC)  # the index is the UTC day's
        doc = {
            **fixed,
            "offset": event.offset,
            "timestamp": text,
            "message": event.text,
            "truncated": event.truncated,
        }
        if event.level:
            doc["level"] = event.level
        day = stamp.toordinal()
        index = indices.get(day) or indices.setdefault(day, index_name(job.tenant.slug, stamp))
        # index names and ids are plain ASCII (slug, date, uuid, digits): no escaping needed
        body.append(f'{{"index":{{"_index":"{index}","_id":"{id_prefix}{event.offset}"}}}}\n')
        body.append(_encode(doc) + "\n")
        docs.append(doc)
        if len(body) >= 2 * settings.TORUS_SHIPPER_BULK_DOCS:
            sent.append(_sender().submit(_send, "".join(body)))
            body = []
    if body:
        sent.append(_sender().submit(_send, "".join(body)))
    error = _first_error(sent)  # waits for every request
    if error is not None:
        # the traceback keeps this frame: it must not keep the error (a cycle the collector
        # frees late, with the read's documents: megabytes a retry while Elasticsearch is away)
        del docs, body, sent
        try:
            raise error
        finally:
            del error
    points = _metric_points(attempt, stream, found, now)
    if points:
        points_store(points)
    if any(event.text.startswith(HEARTBEAT) for event in found):
        heartbeats_record(redis_client(), attempt_ids=[attempt.pk], now=now.timestamp())
    publish_lines(job_id=job.id, lines=[to_line(doc) for doc in docs])
    publish_metrics(job_id=job.id, points=points)


def _first_error(sent: list) -> BaseException | None:
    """Wait for every request; the first one's error, if any (the list is emptied: a future
    holds its exception)."""
    errors = [future.exception() for future in sent]
    sent.clear()
    return next((error for error in errors if error is not None), None)


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_senders: list[ThreadPoolExecutor] = []


def _sender() -> ThreadPoolExecutor:
    """One thread that sends bulk requests in order (the Elasticsearch client is thread-safe)."""
    if not _senders:
        _senders.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="shipper-bulk"))
    return _senders[0]


def _send(body: str) -> None:
    """One bulk request; BulkIndexError if any document of it was refused."""
    response = client().bulk(
        operations=body, refresh=False, filter_path="errors,items.*.error,items.*.status"
    )
    if response.get("errors"):
        errors = [item for item in response["items"] if "error" in next(iter(item.values()))]
        raise helpers.BulkIndexError(f"{len(errors)} document(s) failed to index.", errors)


def _metric_points(attempt, stream: str, found, now) -> list[Point]:
    points = []
    job_id, attempt_id = str(attempt.job_id), str(attempt.id)
    for event in found:
        parsed = parse_metric_line(event.text)
        if parsed is None:
            continue
        step, values = parsed
        stamp = event.timestamp or now
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)  # as Django stores a naive time (TIME_ZONE UTC)
        stamp = stamp.isoformat()
        points += [
            Point(job_id, attempt_id, stream, event.offset, step, name, value, stamp)
            for name, value in values.items()
        ]
    return points


def _advance(
    cursor: LogCursor, *, offset: int, skipping: bool, lines: int, complete: bool = False
) -> bool:
    """Move the cursor from where it was read to `offset` (the object too); False (nothing
    written) when another shipper moved it meanwhile (its shard's lease passed while this
    one was paused). Nothing new (an idle stream, ten passes a second) writes nothing."""
    new = (offset, skipping, cursor.lines + lines, complete)
    if new == (cursor.offset, cursor.skipping, cursor.lines, cursor.complete):
        return True
    moved = LogCursor.objects.filter(
        pk=cursor.pk, offset=cursor.offset, skipping=cursor.skipping, complete=False
    ).update(offset=offset, skipping=skipping, lines=cursor.lines + lines, complete=complete)
    if not moved:
        logger.info("cursor %s was moved by another shipper; leaving it", cursor.pk)
        return False
    cursor.offset, cursor.skipping, cursor.lines, cursor.complete = new
    return True


def ship_pass(*, shards: ShardLeases | None = None) -> PassStats:
    stats = PassStats()
    for attempt, stream, cursor in _active_attempts(shards=shards):
        key = f"{attempt.pk}:{stream}"
        if PASS.parked(key=key, base_seconds=PARK_SECONDS, max_seconds=PARK_MAX_SECONDS):
            stats.behind += 1
            continue
        try:
            for _ in range(settings.TORUS_SHIPPER_READS_PER_PASS):  # no stream starves others
                shipped = ship_stream(attempt, stream, cursor=cursor)
                stats.documents += shipped
                if shipped == 0:
                    break
                attempt.refresh_from_db(fields=["state"])
            else:
                stats.behind += 1
        except ClusterUnavailable as exc:  # its cluster's log source did not answer
            logger.warning("logs of attempt %s unavailable now: %s", attempt.pk, exc)
            stats.behind += 1
            continue
        except (ApiError, TransportError, helpers.BulkIndexError):
            raise  # Elasticsearch's trouble, not the stream's: the loop waits and retries
        except (IntegrityError, JobAttempt.DoesNotExist) as exc:
            # its job was deleted while we shipped it (its cursor or metric rows cannot be
            # written): nothing is left to ship; anything else parks the stream
            if JobAttempt.objects.filter(pk=attempt.pk).exists():
                PASS.failed(key=key, error=exc)
            else:
                logger.info("attempt %s was deleted while its logs were shipped", attempt.pk)
            continue
        except Exception as exc:  # a file this shipper may not read: parked, the others ship
            PASS.failed(key=key, error=exc)
            stats.behind += 1
            continue
        PASS.succeeded(key=key)
        stats.streams += 1
    return stats


def run(*, once: bool = False) -> None:
    """The shipper's loop: a pass every TORUS_SHIPPER_INTERVAL over the shards it holds;
    Elasticsearch down means wait and retry from the stored offsets, never skip. The leases
    are given back when the loop ends (a clean stop; SIGTERM raises SystemExit)."""
    shards = ShardLeases(
        shards=settings.TORUS_SHIPPER_SHARDS, ttl=settings.TORUS_SHIPPER_LEASE_SECONDS
    )
    try:
        _loop(shards=shards, once=once)
    finally:
        try:
            shards.release()
        except RedisError as exc:  # they expire by themselves
            logger.warning("could not give back the shard leases: %s", exc)


def _loop(*, shards: ShardLeases, once: bool) -> None:
    template_installed = False
    backoff = settings.TORUS_SHIPPER_INTERVAL
    next_scan = 0.0  # signatures need no 100 ms latency: their query was half an idle pass
    while True:
        close_old_connections()
        try:
            if not template_installed:
                template_install()
                template_installed = True
            held = shards.refresh(force=once)
            stats = ship_pass(shards=shards)
            if 0 in held and time.monotonic() >= next_scan:  # one shipper looks for signatures
                scan_pending()
                next_scan = time.monotonic() + settings.TORUS_SIGNATURE_SCAN_INTERVAL
            backoff = settings.TORUS_SHIPPER_INTERVAL
            if not stats.behind:
                telemetry.caught_up(shards=held)
            if stats.documents:
                telemetry.shipped(documents=stats.documents)
                logger.info("shipped %d documents from %d streams", stats.documents, stats.streams)
        except (ApiError, TransportError, helpers.BulkIndexError) as exc:
            telemetry.elasticsearch_failed(error=exc)
            logger.warning("Elasticsearch unavailable (%s); retrying in %.1f s", exc, backoff)
            backoff = min(backoff * 2, 30.0)
        if once:
            return
        time.sleep(backoff)
