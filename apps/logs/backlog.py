"""The job page's backlog (the websocket's opening message): a job's last lines, newest
attempt first, each attempt from the source that is complete for it.

- An ended attempt: its output as its cluster's log source holds it (apps/logs/sources.py),
  the source GET /jobs/{id}/logs/ reads. Its output is final there, whether or not the
  shipper has caught up with it yet, and whatever Elasticsearch still keeps of it. Parsed
  into events as the shipper parses them (same offsets, same masking), so the lines the
  shipper sends later are recognised as already shown.
- A running attempt, or an ended one its source no longer has (a deleted pod, a file refused
  or gone, a cluster that does not answer): Elasticsearch, refreshed first.

`seen` holds, per (attempt number, stream), the offset of the last line read: a live line at
or before it is one the viewer already has (apps/logs/consumers.py drops it)."""

import heapq
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from apps.compute.backends.base import ClusterUnavailable
from apps.jobs.models import ATTEMPT_ENDED
from apps.logs.parsing import events
from apps.logs.search_backlog import last_lines
from apps.logs.sources import log_ref, source_for
from apps.secrets.mask import masker_for

STREAMS = ("stdout", "stderr")
FIRST_READ_BYTES = 64 * 1024  # most tails are in the last 64 KiB; else 4 times more, ...
MAX_READ_BYTES = 4 * 1024 * 1024  # ... up to this: a tail of very long lines shows fewer
_EARLIEST = datetime.min.replace(tzinfo=UTC)


@dataclass
class Backlog:
    lines: list[dict] = field(default_factory=list)
    seen: dict[tuple[int, str], int] = field(default_factory=dict)
    sources: dict[int, str] = field(default_factory=dict)  # attempt number -> "log"|"search"


def job_backlog(*, job, count: int, stream: str | None = None) -> Backlog:
    """The job's last `count` lines (of one stream, if given), oldest first."""
    streams = (stream,) if stream else STREAMS
    result = Backlog()
    parts: list[list[dict]] = []
    remaining = count
    for attempt in job.attempts.order_by("-number"):
        if remaining <= 0:
            break
        attempt.job = job  # its cluster and spec, read once
        lines = None
        if attempt.state in ATTEMPT_ENDED:
            lines = _from_log_source(attempt, streams, remaining, result.seen)
        if lines is None:
            lines = last_lines(job=job, count=remaining, stream=stream, attempt=attempt)
            for line in lines:
                key = (line["attempt_number"], line["stream"])
                result.seen[key] = max(result.seen.get(key, -1), line["offset"])
            result.sources[attempt.number] = "search"
        else:
            result.sources[attempt.number] = "log"
        parts.append(lines)
        remaining -= len(lines)
    result.lines = [line for part in reversed(parts) for line in part]
    return result


def _from_log_source(attempt, streams, count: int, seen: dict) -> list[dict] | None:
    """The attempt's last `count` lines from its log source, its streams merged by the times
    their lines carry (stdout first where none says otherwise); None when the source has none
    of its streams, or cannot be read (the caller asks Elasticsearch)."""
    masker = masker_for(attempt)
    per_stream, read = [], {}
    for stream in streams:
        try:
            found = tail_events(attempt=attempt, stream=stream, count=count)
        except (ClusterUnavailable, OSError):  # unreachable, or a file refused (a link)
            return None
        if found is None:  # a stream never written: no lines, as the logs endpoint says
            continue
        if found:
            read[(attempt.number, stream)] = found[-1].offset
        per_stream.append([_line(attempt, stream, event, masker) for event in found])
    if not per_stream:
        return None
    seen.update(read)
    merged = heapq.merge(*(_keyed(lines) for lines in per_stream), key=lambda pair: pair[0])
    return [line for _, line in merged][-count:] if count else []


def tail_events(*, attempt, stream: str, count: int) -> list | None:
    """The last `count` events (apps/logs/parsing.py) of an ended attempt's stream, read
    from the end in growing windows; None when its source has no such stream."""
    source = source_for(attempt=attempt)
    ref = log_ref(attempt=attempt, stream=stream)
    size = source.size(ref=ref)
    if size is None:
        return None
    window = FIRST_READ_BYTES
    while True:
        start = max(0, size - window)
        data = source.read(ref=ref, offset=start, limit=size - start)
        if data is None:
            return None
        base = start
        if start:  # from the first whole line; the first event may be a traceback's tail
            newline = data.find(b"\n")
            data, base = (data[newline + 1 :], start + newline + 1) if newline >= 0 else (b"", size)
        found, _ = events(data, base, final=True, max_line=settings.TORUS_LOG_MAX_LINE)
        if start and (len(found) > count or window >= MAX_READ_BYTES):
            return found[1:][-count:] if count else []
        if not start:
            return found[-count:] if count else []
        window *= 4


def _line(attempt, stream: str, event, masker) -> dict:
    text = masker.text(event.text, cut=event.truncated) if masker else event.text
    stamp = event.timestamp
    if stamp is not None and stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)  # as the shipper stores it
    return {
        "attempt_number": attempt.number,
        "stream": stream,
        "offset": event.offset,
        "timestamp": stamp.isoformat() if stamp else None,
        "level": event.level,
        "message": text,
    }


def _keyed(lines: list[dict]):
    """(time, line): the line's own time, else the last one before it in its stream."""
    current = _EARLIEST
    for line in lines:
        if line["timestamp"]:
            current = datetime.fromisoformat(line["timestamp"]).astimezone(UTC)
        yield current, line
