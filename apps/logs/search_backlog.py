"""The last lines of a job from Elasticsearch (the websocket's backlog)."""

from elasticsearch import ApiError, TransportError

from apps.logs.es import client, index_pattern


def last_lines(*, job, count: int) -> list[dict]:
    try:
        result = client().search(
            index=index_pattern(job.tenant.slug),
            ignore_unavailable=True,
            allow_no_indices=True,
            query={
                "bool": {
                    "filter": [
                        {"term": {"tenant": str(job.tenant_id)}},
                        {"term": {"job": str(job.pk)}},
                    ]
                }
            },
            sort=[{"timestamp": "desc"}, {"offset": "desc"}],
            size=count,
        )
    except (ApiError, TransportError):
        return []
    return [to_line(hit["_source"]) for hit in reversed(result["hits"]["hits"])]


def to_line(doc: dict) -> dict:
    return {
        key: doc.get(key)
        for key in ("attempt_number", "stream", "offset", "timestamp", "level", "message")
    }
