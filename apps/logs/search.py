"""Searching job log lines in Elasticsearch, always inside the actor's tenants.

The tenant scope is applied here and only here, twice over: the indices searched are those
of the actor's tenants (`torus-logs-<slug>-*`), and a `terms` filter on `tenant` (the tenant
UUIDs) sits in `bool.filter`. The pattern alone is not enough: `torus-logs-acme-*` also
matches the indices of a tenant called `acme-x`. The user's text goes to `simple_query_string`
on `message` only, which has no field syntax and cannot widen a filter.
"""

import base64
import binascii
import json
import logging
import re
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from django.core.exceptions import ValidationError
from elasticsearch import ApiError, TransportError

from apps.core.actor import Actor
from apps.jobs.models import Job, JobAttempt
from apps.logs.es import client, index_pattern
from apps.tenancy.models import Project, Tenant
from apps.tenancy.policies import authorize, authorize_any

logger = logging.getLogger(__name__)

STREAMS = ("stdout", "stderr")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MAX_SIZE = 500
MAX_CONTEXT = 200
MAX_BUCKETS = 2000
AUTO_BUCKETS = 60
SEARCH_TIMEOUT_S = 15
SEARCH_PARAMS = {"ignore_unavailable": "true", "allow_no_indices": "true"}
JSON_HEADERS = {"accept": "application/json", "content-type": "application/json"}
UNAVAILABLE = "Log search is unavailable right now (Elasticsearch did not answer); try again."

# (timestamp, offset) is not unique across attempts and streams; attempt and stream complete
# it to the document's identity, so search_after never skips or repeats a line.
SORT = [
    {"timestamp": {"order": "desc"}},
    {"offset": {"order": "desc"}},
    {"attempt": {"order": "desc"}},
    {"stream": {"order": "desc"}},
]
HIGHLIGHT = {
    "encoder": "html",  # the message is HTML-escaped; only the <mark> tags are markup
    "pre_tags": ["<mark>"],
    "post_tags": ["</mark>"],
    "fields": {"message": {"number_of_fragments": 0}},
}
INTERVAL_RE = re.compile(r"^([1-9][0-9]{0,5})(ms|s|m|h|d)$")
UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
NICE_INTERVALS = [
    "1s", "2s", "5s", "10s", "15s", "30s", "1m", "2m", "5m", "10m", "15m", "30m",
    "1h", "2h", "3h", "6h", "12h", "1d", "2d", "7d", "30d",
]  # fmt: skip


class SearchUnavailable(Exception):
    """Elasticsearch could not be reached or could not answer (HTTP 503)."""


# ---------------------------------------------------------------------------- public


def log_search(
    *,
    actor: Actor,
    query: str = "",
    project=None,
    job=None,
    attempt=None,
    stream: str | None = None,
    level: str | list[str] | None = None,
    node: str | None = None,
    rank: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    size: int = 50,
    search_after: str | None = None,
    histogram: bool = False,
    histogram_interval: str | None = None,
) -> dict:
    """Log lines matching `query` and the filters, newest first.

    `search_after` is the `next` token of the previous page. A histogram of all matching
    lines is added when `histogram` is true or `histogram_interval` is given (a fixed
    interval such as "1m"; otherwise one is chosen for about 60 buckets over the range).
    """
    if not 1 <= size <= MAX_SIZE:
        raise ValidationError({"size": [f"Must be between 1 and {MAX_SIZE}."]})
    if since and until and until < since:
        raise ValidationError({"until": ["Must not be before since."]})
    cursor = decode_cursor(search_after) if search_after else None
    want_histogram = bool(histogram or histogram_interval)
    if histogram_interval == "auto":
        histogram_interval = None
    if histogram_interval:
        _interval_ms(histogram_interval)  # a 400 before any search

    scope = _tenant_scope(actor)
    filters, scope = _object_filters(actor, scope, project=project, job=job, attempt=attempt)
    filters += _value_filters(
        stream=stream, level=level, node=node, rank=rank, since=since, until=until
    )
    result = {"hits": [], "total": 0, "next": None, "took_ms": 0}
    if want_histogram:
        result.update(histogram=[], interval=histogram_interval)
    if not scope:
        return result

    indices = _indices(scope.values())
    bool_query = _bool_query(query, tenant_ids=list(scope), filters=filters)
    body = {
        "query": bool_query,
        "sort": SORT,
        "size": size + 1,  # one more than asked: is there a next page?
        "track_total_hits": True,
    }
    if query.strip():
        body["highlight"] = HIGHLIGHT
    if cursor is not None:
        body["search_after"] = cursor
    bounds_known = since is not None and until is not None
    if want_histogram and bounds_known:
        body["aggs"] = _histogram_aggs(_ms(since), _ms(until), histogram_interval)
    elif want_histogram:
        body["aggs"] = {
            "first": {"min": {"field": "timestamp"}},
            "last": {"max": {"field": "timestamp"}},
        }

    response = _search(indices, body)
    hits = response["hits"]["hits"]
    result["hits"] = [_line(hit) for hit in hits[:size]]
    result["total"] = response["hits"]["total"]["value"]
    result["took_ms"] = response.get("took", 0)
    if len(hits) > size:
        result["next"] = encode_cursor(hits[size - 1]["sort"])

    if want_histogram:
        aggs = response.get("aggregations")
        if aggs is None:  # the tenant has no log index yet: nothing to count
            result["histogram"] = []
            return result
        if not bounds_known:
            first, last = aggs["first"]["value"], aggs["last"]["value"]
            if first is None:  # nothing matched
                return result
            low = _ms(since) if since else int(first)
            high = _ms(until) if until else int(last)
            aggs_body = _histogram_aggs(low, high, histogram_interval)
            extra = _search(indices, {"query": bool_query, "size": 0, "aggs": aggs_body})
            result["took_ms"] += extra.get("took", 0)
            aggs = extra["aggregations"]
        result["interval"] = aggs["histogram"]["meta"]["interval"]
        result["histogram"] = [
            {"time": bucket["key_as_string"], "count": bucket["doc_count"]}
            for bucket in aggs["histogram"]["buckets"]
        ]
    return result


def log_context(*, actor: Actor, hit_id: str, before: int = 10, after: int = 10) -> dict | None:
    """The line `hit_id` and its neighbours in the same attempt and stream, by offset:
    `{"hit", "before", "after"}` with both lists in offset order. None when the line is not
    visible to the actor (another tenant's line reads exactly like a missing one)."""
    for name, value in (("before", before), ("after", after)):
        if not 0 <= value <= MAX_CONTEXT:
            raise ValidationError({name: [f"Must be between 0 and {MAX_CONTEXT}."]})
    parsed = parse_hit_id(hit_id)
    if parsed is None:
        raise ValidationError({"id": ["Not a log line id (attempt:stream:offset)."]})
    attempt_id, stream, offset = parsed
    attempt = (
        JobAttempt.objects.visible_to(actor)
        .select_related("job__tenant")
        .filter(pk=attempt_id)
        .first()
    )
    if attempt is None:
        return None
    tenant = attempt.job.tenant
    authorize(actor, resource="logs", action="context", tenant_id=tenant.id)

    indices = index_pattern(tenant.slug)
    same_stream = [
        {"terms": {"tenant": [str(tenant.id)]}},
        {"term": {"attempt": str(attempt_id)}},
        {"term": {"stream": stream}},
    ]
    found = _search(
        indices,
        {"query": {"bool": {"filter": [*same_stream, {"term": {"offset": offset}}]}}, "size": 1},
    )["hits"]["hits"]
    if not found:
        return None

    def neighbours(size: int, comparison: str, order: str) -> list[dict]:
        if size == 0:
            return []
        body = {
            "query": {
                "bool": {"filter": [*same_stream, {"range": {"offset": {comparison: offset}}}]}
            },
            "sort": [{"offset": {"order": order}}],
            "size": size,
        }
        return [_line(hit) for hit in _search(indices, body)["hits"]["hits"]]

    return {
        "hit": _line(found[0]),
        "before": list(reversed(neighbours(before, "lt", "desc"))),
        "after": neighbours(after, "gt", "asc"),
    }


def parse_hit_id(hit_id: str) -> tuple[uuid.UUID, str, int] | None:
    """`<attempt uuid>:<stream>:<byte offset>`, or None when malformed."""
    parts = (hit_id or "").split(":")
    if len(parts) != 3 or parts[1] not in STREAMS or not parts[2].isdigit():
        return None
    try:
        return uuid.UUID(parts[0]), parts[1], int(parts[2])
    except ValueError:
        return None


def encode_cursor(sort_values: list) -> str:
    raw = json.dumps(sort_values, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> list:
    """The sort values of the last line of the previous page. Only its shape is checked: a
    crafted token moves the page start, and the tenant filter still applies."""
    invalid = ValidationError({"after": ["Invalid cursor."]})
    try:
        values = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise invalid from None
    if not (
        isinstance(values, list)
        and len(values) == len(SORT)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in values[:2])
        and all(isinstance(v, str) and 0 < len(v) <= 64 for v in values[2:])
        and abs(values[0]) < 2**62
        and abs(values[1]) < 2**62
    ):
        raise invalid
    return values


# ---------------------------------------------------------------------------- scope


def _tenant_scope(actor: Actor) -> dict:
    """{tenant id: slug} of the actor's tenants where it may search logs (PermissionDenied if
    it belongs to tenants but may search in none). A token acts in its one tenant, read with
    it (and read again whenever the tenant changes: apps/tenancy/token_cache.py)."""
    allowed_ids = authorize_any(actor, resource="logs", action="search")
    token = actor.token
    if token is not None and list(allowed_ids) == [token.tenant_id]:
        return {token.tenant_id: token.tenant.slug}
    return dict(Tenant.objects.filter(pk__in=allowed_ids).values_list("id", "slug"))


def _object_filters(actor: Actor, scope: dict, *, project, job, attempt) -> tuple[list, dict]:
    """Filters for the named project, job and attempt, each checked visible to the actor;
    the scope narrows to their tenant."""
    lookups = [
        ("project", project, Project.objects, "tenant_id"),
        ("job", job, Job.objects, "tenant_id"),
        ("attempt", attempt, JobAttempt.objects.select_related("job"), "job.tenant_id"),
    ]
    filters, errors = [], {}
    for name, value, manager, tenant_attr in lookups:
        if value is None:
            continue
        obj = manager.visible_to(actor).filter(pk=value).first()
        if obj is None:
            errors[name] = ["Not found."]
            continue
        tenant_id = obj.job.tenant_id if tenant_attr == "job.tenant_id" else obj.tenant_id
        scope = {t: slug for t, slug in scope.items() if t == tenant_id}
        filters.append({"term": {name: str(obj.pk)}})
    if errors:
        raise ValidationError(errors)
    return filters, scope


def _value_filters(*, stream, level, node, rank, since, until) -> list:
    filters = []
    if stream:
        if stream not in STREAMS:
            raise ValidationError({"stream": [f"One of {', '.join(STREAMS)}."]})
        filters.append({"term": {"stream": stream}})
    if level:
        levels = [level] if isinstance(level, str) else list(level)
        unknown = sorted(set(levels) - set(LEVELS))
        if unknown:
            raise ValidationError({"level": [f"Unknown level: {', '.join(unknown)}."]})
        filters.append({"terms": {"level": levels}})
    if node:
        filters.append({"term": {"node": node}})
    if rank is not None:
        filters.append({"term": {"rank": rank}})
    if since or until:
        bounds = {"format": "epoch_millis"}
        if since:
            bounds["gte"] = _ms(since)
        if until:
            bounds["lte"] = _ms(until)
        filters.append({"range": {"timestamp": bounds}})
    return filters


def _bool_query(text: str, *, tenant_ids: list, filters: list) -> dict:
    text = (text or "").strip()
    if text:
        must = {
            "simple_query_string": {
                "query": text,
                "fields": ["message"],
                "default_operator": "and",
                "lenient": True,
            }
        }
    else:
        must = {"match_all": {}}
    tenant_filter = {"terms": {"tenant": [str(t) for t in tenant_ids]}}
    return {"bool": {"must": [must], "filter": [tenant_filter, *filters]}}


def _indices(slugs) -> str:
    return ",".join(index_pattern(slug) for slug in sorted(slugs))


# ---------------------------------------------------------------------------- histogram


def _interval_ms(interval: str) -> int:
    match = INTERVAL_RE.match(interval or "")
    if not match:
        raise ValidationError({"interval": ["A whole number and a unit: ms, s, m, h or d."]})
    return int(match.group(1)) * UNIT_MS[match.group(2)]


def _auto_interval(span_ms: int) -> str:
    for interval in NICE_INTERVALS:
        if span_ms / _interval_ms(interval) <= AUTO_BUCKETS:
            return interval
    return f"{-(-span_ms // (AUTO_BUCKETS * UNIT_MS['d']))}d"


def _histogram_aggs(low_ms: int, high_ms: int, interval: str | None) -> dict:
    interval = interval or _auto_interval(high_ms - low_ms)
    buckets = (high_ms - low_ms) // _interval_ms(interval) + 1
    if buckets > MAX_BUCKETS:
        raise ValidationError(
            {
                "interval": [
                    f"{interval} gives {buckets} buckets over this range (at most {MAX_BUCKETS})."
                    " Use a larger interval or a shorter range."
                ]
            }
        )
    return {
        "histogram": {
            "date_histogram": {
                "field": "timestamp",
                "fixed_interval": interval,
                "min_doc_count": 0,
                "extended_bounds": {"min": low_ms, "max": high_ms},
                "format": "strict_date_optional_time",
            },
            "meta": {"interval": interval},
        }
    }


# ---------------------------------------------------------------------------- plumbing


def _ms(when: datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int((when - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))


def _search(indices: str, body: dict) -> dict:
    """POST /<indices>/_search: the client's transport called directly (its `search()` checks
    and rewrites every parameter first, about a millisecond a request here)."""
    try:
        return (
            client(timeout=SEARCH_TIMEOUT_S)
            .perform_request(
                "POST",
                f"/{quote(indices, safe=',*')}/_search",
                params=SEARCH_PARAMS,
                headers=JSON_HEADERS,
                body=body,
            )
            .body
        )
    except TransportError as exc:  # connection refused, timeout, TLS...
        logger.warning("log search: Elasticsearch unreachable: %s", exc)
        raise SearchUnavailable(UNAVAILABLE) from exc
    except ApiError as exc:
        if exc.meta.status in (429, 500, 502, 503, 504):
            logger.warning("log search: Elasticsearch answered %s: %s", exc.meta.status, exc)
            raise SearchUnavailable(UNAVAILABLE) from exc
        raise


def _line(hit: dict) -> dict:
    source = hit["_source"]
    highlight = hit.get("highlight", {}).get("message")
    return {
        "id": hit["_id"],
        "project": source.get("project"),
        "job": source.get("job"),
        "attempt": source.get("attempt"),
        "attempt_number": source.get("attempt_number"),
        "stream": source.get("stream"),
        "node": source.get("node"),
        "rank": source.get("rank"),
        "offset": source.get("offset"),
        "timestamp": source.get("timestamp"),
        "level": source.get("level"),
        "message": source.get("message", ""),
        "truncated": bool(source.get("truncated", False)),
        "highlight": highlight[0] if highlight else None,
    }
