"""Log-search benchmark: p50/p95 of `GET /api/v1/logs/search/` over at least 1,000,000
indexed log lines, beside the very same Elasticsearch requests sent to Elasticsearch directly;
the ratio of the two is the API's overhead.

Run alone:  .venv/bin/python bench/search.py [--quick] [--lines N] [--queries K] [--reload]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "search", "metrics": {...}, "peers": {...}, "ratios": {...}}

It uses the real `torus` database (tenants `bench-search` and `bench-search-other`, their
projects and job rows) and the platform's Elasticsearch (indices
`torus-logs-bench-search-YYYY.MM.DD` and `torus-logs-bench-search-other-YYYY.MM.DD`, kept
between runs unless --drop), and starts its own uvicorn on a free port with
TORUS_REDIS_DB_BASE=4. See bench/README.md.
"""

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import django_setup, environment, finish, manage, percentiles
from _search_data import OTHER_SLUG, TENANT_SLUG, log
from _search_profile import handler_comparison, profile_requests
from _search_queries import (
    capture,
    check_tenant,
    floors,
    measure,
    plain_http_ab,
    query_set,
    relay_floor,
)
from _search_store import (
    drop_indices,
    ensure_rows,
    index_sizes,
    load,
    signature,
    stored_set,
    wait_es,
)

from scripts.devstack import start_web, stop_all

# -- main ------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200,000 lines, 20 iterations")
    parser.add_argument("--lines", type=int, help="lines of the bench tenant (default 1,000,000)")
    parser.add_argument("--other-lines", type=int, help="lines of the other tenant (lines/5)")
    parser.add_argument("--queries", type=int, help="timed iterations per query (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations per query")
    parser.add_argument("--profile-requests", type=int, default=20, help="per query, in-process")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reload", action="store_true", help="index the documents again")
    parser.add_argument("--drop", action="store_true", help="delete the bench indices at the end")
    parser.add_argument("--drop-only", action="store_true", help="delete them and exit")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary log folder")
    args, unknown = parser.parse_known_args()  # run_all passes its arguments to every script
    if unknown:
        log(f"ignoring arguments meant for other benchmarks: {' '.join(unknown)}")
    n_lines = args.lines or (200_000 if args.quick else 1_000_000)
    if n_lines < 10_000 or (args.other_lines is not None and args.other_lines < 1_000):
        parser.error("--lines must be at least 10,000 and --other-lines at least 1,000")
    lines = {TENANT_SLUG: n_lines, OTHER_SLUG: args.other_lines or n_lines // 5}
    k = args.queries or (20 if args.quick else 50)
    logdir = Path(tempfile.mkdtemp(prefix="torus-bench-search-"))

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result = None
    es = None
    try:
        manage("migrate", "--noinput", "--verbosity", "0")
        django_setup()
        import httpx
        from django.conf import settings
        from django.test import Client
        from elasticsearch import ApiError, TransportError
        from elasticsearch.helpers import BulkIndexError

        from apps.logs.es import client as es_client

        es = es_client()
        wait_es(es)
        if args.drop_only:
            log(f"deleted {len(drop_indices(es))} bench indices")
            return 0
        env_start = environment()
        run_started = time.monotonic()

        # ---- data set (not timed): rows, then the documents unless already stored
        rows = ensure_rows(args.seed, lines)
        token = rows["main"]["token"]
        sig = signature(args.seed, lines, rows)
        meta = None if args.reload else stored_set(es, sig, lines)
        if meta is not None:
            anchor = datetime.fromisoformat(meta["anchor"])
            loading = {"reused": True, "documents": sum(lines.values())}
            log(f"reusing the stored {sum(lines.values()):,} documents (loaded for {anchor})")
        else:
            anchor = datetime.now(UTC).replace(second=0, microsecond=0)
            log(f"indexing {lines[TENANT_SLUG]:,} + {lines[OTHER_SLUG]:,} documents ...")
            for attempt in range(3):  # Elasticsearch restarted under us: load again
                try:
                    loading = load(es, args.seed, rows, anchor, sig)
                    break
                except (ApiError, TransportError, BulkIndexError) as exc:
                    if attempt == 2:
                        raise
                    log(f"loading failed ({type(exc).__name__}: {str(exc)[:200]}); again")
                    wait_es(es)
        sizes = index_sizes(es)
        log(f"indices: {json.dumps(sizes)}")
        for slug, want in lines.items():
            if sizes[slug]["docs"] != want:
                raise AssertionError(f"{slug}: {sizes[slug]['docs']} documents, expected {want}")

        mine = {a.id for job in rows["plans"][TENANT_SLUG] for a in job.attempts}
        foreign = {a.id for job in rows["plans"][OTHER_SLUG] for a in job.attempts}
        queries = query_set(rows, anchor)

        # ---- the exact Elasticsearch requests behind each API query (in-process capture)
        django_client = Client()
        first_page, _ = capture(django_client, token, {"size": "100"})
        if not first_page["next"]:
            raise AssertionError("no second page of the newest lines")
        queries["newest_page2"]["after"] = first_page["next"]
        captured = {}
        for name, params in queries.items():
            body, calls = capture(django_client, token, params)
            if body["total"] == 0:
                log(f"warning: {name} matches nothing in this data set")
            captured[name] = calls
            log(f"{name}: {len(calls)} Elasticsearch request(s), total {body['total']:,}")

        # the tenant filter has work: the index pattern alone also matches the other tenant
        indices, body = captured["rare_phrase"][0]
        unfiltered = {**body, "query": {"bool": {"must": body["query"]["bool"]["must"]}}}
        pattern_total = es.search(
            index=indices, ignore_unavailable=True, allow_no_indices=True, **unfiltered
        )["hits"]["total"]["value"]
        other_token = rows["other"]["token"]
        other_view, _ = capture(django_client, other_token, queries["rare_phrase"])
        check_tenant("other tenant's view", other_view, foreign, mine)
        rare_total, _ = capture(django_client, token, queries["rare_phrase"])
        if pattern_total != rare_total["total"] + other_view["total"]:
            raise AssertionError(
                f"tenant split: pattern {pattern_total} != {rare_total['total']} + "
                f"{other_view['total']}"
            )
        log(
            f"index pattern {indices} alone: {pattern_total} rare-phrase lines; the tenant "
            f"filter keeps {rare_total['total']} ({other_view['total']} are the other tenant's)"
        )

        # ---- timed: API over HTTP (uvicorn, keep-alive) vs the same requests to Elasticsearch
        web, port = start_web(logdir, workers=1)
        results = {}
        limits = httpx.Limits(max_keepalive_connections=1, max_connections=1)
        with (
            httpx.Client(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
                limits=limits,
            ) as api_http,
            httpx.Client(
                base_url=settings.TORUS_ELASTICSEARCH_URL.rstrip("/"), timeout=60, limits=limits
            ) as es_http,
        ):
            log(f"{k} timed iterations per query after {args.warmup} warm-up ones")
            for name, params in queries.items():
                size = int(params.get("size", 50))
                results[name] = measure(
                    api_http, es_http, name, params, captured[name], k, args.warmup, size,
                    mine, foreign,
                )  # fmt: skip
            floor = floors(api_http, k, args.warmup)
            relay = relay_floor(es_http, captured, k, logdir)
            plain = plain_http_ab(logdir, api_http, token, queries, k)
        web.stop()

        profile = profile_requests(token, queries, args.profile_requests)
        profile["handlers"] = handler_comparison(token, queries, args.profile_requests)
        api_all = [v for r in results.values() for v in r.pop("_api")]
        es_all = [v for r in results.values() for v in r.pop("_es")]
        api_p, es_p = percentiles(api_all), percentiles(es_all)
        metrics = {
            "lines": lines[TENANT_SLUG],
            "other_tenant_lines": lines[OTHER_SLUG],
            "indexed_documents": sum(s["docs"] for s in sizes.values()),
            "indices": sizes,
            "store_mb": round(sum(s["store_mb"] for s in sizes.values()), 1),
            "loading": loading,
            "iterations_per_query": k,
            "warmup_per_query": args.warmup,
            "uvicorn_workers": 1,
            "api_ms": api_p,
            "es_ms": es_p,
            "overhead_ms_p50": round(api_p["p50"] - es_p["p50"], 2),
            "floors": floor,
            "relay": relay,
            "plain_http": plain,
            "queries": results,
            "tenant_filter": {
                "rare_phrase_lines_matching_index_pattern": pattern_total,
                "rare_phrase_lines_of_tenant": rare_total["total"],
                "rare_phrase_lines_of_other_tenant_excluded": other_view["total"],
                "foreign_hits_returned": 0,
            },
            "profile": profile,
            "environment_start": env_start,
            "environment_end": environment(),
            "run_seconds": round(time.monotonic() - run_started, 1),
        }
        peers = {
            "elasticsearch_direct_ms": es_p,
            "elasticsearch_through_haproxy_ms": relay["relay_ms"],
            "elasticsearch_direct_ms_by_query": {n: r["es_ms"] for n, r in results.items()},
            "elasticsearch_took_ms_by_query": {n: r["es_took_ms"] for n, r in results.items()},
        }
        ratios = {
            "api_vs_es_p50": round(api_p["p50"] / es_p["p50"], 3),
            "api_vs_es_p95": round(api_p["p95"] / es_p["p95"], 3),
            "relay_vs_es_p50": relay["relay_vs_es_p50"],
            "relay_vs_es_p95": relay["relay_vs_es_p95"],
        }
        for name, r in results.items():
            ratios[f"{name}_api_vs_es_p50"] = r["api_vs_es_p50"]
            ratios[f"{name}_api_vs_es_p95"] = r["api_vs_es_p95"]
        log(
            f"all queries: API p50 {api_p['p50']} p95 {api_p['p95']} ms; Elasticsearch p50 "
            f"{es_p['p50']} p95 {es_p['p95']} ms; ratio p50 {ratios['api_vs_es_p50']}, "
            f"p95 {ratios['api_vs_es_p95']}"
        )
        result = {"benchmark": "search", "metrics": metrics, "peers": peers, "ratios": ratios}
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
    finally:
        stop_all()
        if args.drop and es is not None:
            with contextlib.suppress(Exception):
                log(f"deleted {len(drop_indices(es))} bench indices (--drop)")
    return finish("search", result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    sys.exit(main())
