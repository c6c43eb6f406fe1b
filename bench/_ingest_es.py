"""bench/ingest.py's Elasticsearch helpers: the client, counts, settling, the indices."""

import json
import time

from _ingest_data import TEMPLATE

# -- Elasticsearch --------------------------------------------------------------------------------


def es():
    from apps.logs.es import client

    return client()


def es_cpu_seconds() -> float:
    """Elasticsearch's own process CPU (all nodes), from its node stats."""
    stats = es().nodes.stats(metric="process")
    return sum(n["process"]["cpu"]["total_in_millis"] for n in stats["nodes"].values()) / 1000


def es_count(index: str, job_id: str | None = None) -> int:
    es().indices.refresh(index=index, ignore_unavailable=True, allow_no_indices=True)
    query = {"term": {"job": job_id}} if job_id else {"match_all": {}}
    body = es().count(index=index, query=query, ignore_unavailable=True, allow_no_indices=True)
    return body["count"]


def es_settle(timeout: float = 30.0) -> None:
    """Wait until Elasticsearch is quiet (merges of the last phase done), so that the next
    phase's Elasticsearch CPU is its own."""
    deadline = time.monotonic() + timeout
    last = es_cpu_seconds()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = es_cpu_seconds()
        if now - last < 0.15:
            return
        last = now


def delete_indices(pattern: str) -> None:
    names = es().indices.get(index=pattern, allow_no_indices=True, ignore_unavailable=True)
    for name in names:
        es().indices.delete(index=name, ignore_unavailable=True)


def create_rsyslog_index(name: str) -> None:
    """The same settings and mappings as a Torus daily index (the Torus template)."""
    template = json.loads(TEMPLATE.read_text())["template"]
    es().indices.create(index=name, settings=template["settings"], mappings=template["mappings"])
