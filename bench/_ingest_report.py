"""bench/ingest.py's report: counts, figures, the documents compared, py-spy."""

import time
from datetime import UTC, datetime
from pathlib import Path

from _common import pyspy_path, pyspy_start
from _ingest_data import POLL_S, TENANT_SLUG, log
from _ingest_es import es, es_count

from scripts.devstack import Proc

# -- shared ---------------------------------------------------------------------------------------


def wait_count(proc: Proc, index: str, job_id, n: int, started: float, label: str) -> float:
    """Seconds from `started` until Elasticsearch counts n documents (refresh + count every
    POLL_S); fails if the ingester dies or stops making progress for two minutes."""
    last, last_change, said = -1, time.monotonic(), 0.0
    while True:
        time.sleep(POLL_S)
        count = es_count(index, job_id)
        elapsed = time.perf_counter() - started
        if count >= n:
            if count > n:
                raise RuntimeError(f"{label}: {count} documents for {n} lines (duplicates?)")
            return elapsed
        if count != last:
            last, last_change = count, time.monotonic()
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{label}: exited with {count}/{n} documents:\n{proc.tail()}")
        if time.monotonic() - last_change > 120:
            raise RuntimeError(f"{label}: stuck at {count}/{n} documents:\n{proc.tail()}")
        if time.monotonic() - said > 10:
            log(f"{label}: {count}/{n} documents after {elapsed:.1f} s")
            said = time.monotonic()


def _figures(n: int, seconds: float, cpu: float, services: dict) -> dict:
    out = {
        "documents": n,
        "wall_s": round(seconds, 2),
        "lines_per_second": round(n / seconds),
        "cpu_s": round(cpu, 2),
        "cpu_seconds_per_million_lines": round(cpu / n * 1e6, 2),
        "es_cpu_s": services["es"],
        "es_cpu_seconds_per_million_lines": round(services["es"] / n * 1e6, 2),
    }
    for key in ("pg", "redis"):
        out[f"{key}_cpu_s"] = services[key]
    return out


def _summary(r: dict) -> str:
    return (
        f"{r['documents']} documents in {r['wall_s']} s ({r['lines_per_second']} lines/s), "
        f"{r['cpu_s']} CPU-s ({r['cpu_seconds_per_million_lines']} per million lines); "
        f"Elasticsearch {r['es_cpu_s']}, PostgreSQL {r['pg_cpu_s']}, Redis {r['redis_cpu_s']} CPU-s"
    )


def compare_documents(rsyslog_index: str, attempt: str, samples: dict) -> dict:
    """The first lines of file 0 as each side indexed them: the same fields and values?"""
    ids = [f"{attempt}:stdout:{offset}" for offset in samples]
    got = {}
    for side, index in (("rsyslog", rsyslog_index), ("torus", f"torus-logs-{TENANT_SLUG}-*")):
        es().indices.refresh(index=index, ignore_unavailable=True, allow_no_indices=True)
        hits = es().search(index=index, query={"ids": {"values": ids}}, size=len(ids))
        got[side] = {h["_id"]: h["_source"] for h in hits["hits"]["hits"]}
    same, differences = 0, []
    for offset, line in samples.items():
        doc_id = f"{attempt}:stdout:{offset}"
        a, b = got["rsyslog"].get(doc_id), got["torus"].get(doc_id)
        if a is None or b is None:
            differences.append({"id": doc_id, "missing": "rsyslog" if a is None else "torus"})
            continue
        a, b = dict(a), dict(b)
        a["truncated"] = str(a.get("truncated")).lower() == "true"
        own_stamp = line[:1].isdigit() or line[:2].startswith("[2")
        stamps = (a.pop("timestamp", None), b.pop("timestamp", None))
        if own_stamp and _instant(stamps[0]) != _instant(stamps[1]):
            differences.append({"id": doc_id, "timestamp": stamps})
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            differences.append({"id": doc_id, "fields": {k: [a.get(k), b.get(k)] for k in keys}})
        else:
            same += 1
    return {"compared": len(samples), "same": same, "differences": differences[:5]}


def _instant(text):
    if not text:
        return None
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


# -- py-spy (optional) ----------------------------------------------------------------------------


def spy_starter(out: Path):
    exe = pyspy_path()
    if not exe:
        log("--py-spy: no py-spy on PATH or in /tmp/bench-pyspy/bin; not sampling")
        return None

    def start(pid: int):
        return pyspy_start(pid, out, rate=100, subprocesses=False)

    return start


MARKERS = [
    ("ship_stream ", "ship_stream (all)"),
    ("events ", "parsing.events (all)"),
    ("_stamp ", "parsing._stamp"),
    ("_level ", "parsing._level"),
    ("_bulk ", "shipper._bulk (all)"),
    ("streaming_bulk ", "helpers.bulk (all)"),
    ("_process_bulk_chunk ", "helpers: one bulk request"),
    ("_chunk_actions ", "helpers: serialising actions"),
    ("dumps ", "JSON encoding"),
    ("isoformat ", "datetime.isoformat"),
    ("_metric_points ", "_metric_points"),
    ("bulk_create ", "JobMetric.bulk_create"),
    ("publish_lines ", "live.publish_lines"),
    ("to_line ", "search_backlog.to_line"),
    ("publish_metrics ", "live.publish_metrics"),
    ("_advance ", "cursor update"),
    ("_active_attempts ", "_active_attempts"),
    ("scan_pending ", "signatures.scan_pending"),
    ("perform_request ", "HTTP to Elasticsearch (all)"),
    ("execute ", "SQL (all)"),
]
