"""The websocket's opening message from Elasticsearch: a job's (or one attempt's) last lines,
and where its latest attempt's streams stand. apps/logs/backlog.py chooses, per attempt,
between these and the attempt's log source."""

from elasticsearch import ApiError, TransportError

from apps.logs.es import client, index_pattern
from apps.logs.models import LogCursor


def last_lines(*, job, count: int, stream: str | None = None, attempt=None) -> list[dict]:
    """The job's last `count` lines (of one stream, of one attempt, if given). Refreshes
    first, so every batch Elasticsearch has acknowledged is included: a viewer subscribed
    before this call misses nothing."""
    es, pattern = client(), index_pattern(job.tenant.slug)
    try:
        es.indices.refresh(index=pattern, ignore_unavailable=True, allow_no_indices=True)
        result = es.search(
            index=pattern,
            ignore_unavailable=True,
            allow_no_indices=True,
            query={
                "bool": {
                    "filter": [
                        {"term": {"tenant": str(job.tenant_id)}},
                        {"term": {"job": str(job.pk)}},
                        *([{"term": {"stream": stream}}] if stream else []),
                        *([{"term": {"attempt": str(attempt.pk)}}] if attempt else []),
                    ]
                }
            },
            sort=[{"timestamp": "desc"}, {"offset": "desc"}],
            size=count,
        )
    except (ApiError, TransportError):
        return []
    return [to_line(hit["_source"]) for hit in reversed(result["hits"]["hits"])]


def streams_complete(*, job) -> dict:
    """{"attempt": n, "stdout": bool, "stderr": bool} for the job's latest attempt: whether
    each stream has been shipped to its end (the attempt ended and nothing is left)."""
    attempt = job.attempts.order_by("-number").first()
    if attempt is None:
        return {"attempt": None, "stdout": False, "stderr": False}
    done = set(
        LogCursor.objects.filter(attempt=attempt, complete=True).values_list("stream", flat=True)
    )
    return {"attempt": attempt.number, "stdout": "stdout" in done, "stderr": "stderr" in done}


def to_line(doc: dict) -> dict:
    return {
        key: doc.get(key)
        for key in ("attempt_number", "stream", "offset", "timestamp", "level", "message")
    }
