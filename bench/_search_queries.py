"""bench/search.py's queries, timed through the API beside Elasticsearch."""

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import percentiles
from _search_data import DAYS, SEARCH, TENANT_SLUG, log

from scripts.devstack import start_relay, start_web

# -- the queries ---------------------------------------------------------------------------------


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def query_set(rows: dict, anchor: datetime) -> dict[str, dict]:
    main = rows["main"]
    plans = rows["plans"][TENANT_SLUG]
    llm = str(main["projects"]["llm"].id)
    biggest = max(plans, key=lambda p: (p.project == "llm", p.lines))
    day, week = iso(anchor - timedelta(days=1)), iso(anchor - timedelta(days=DAYS))
    return {
        "rare_phrase": {"q": '"CUDA out of memory"'},
        "common_term_project": {"q": "loss", "project": llm},
        "errors_last_day": {"level": "ERROR,CRITICAL", "since": day, "until": iso(anchor)},
        "job_term": {"q": "checkpoint", "job": biggest.id},
        "histogram_range": {"q": "NCCL", "histogram": "1", "since": week, "until": iso(anchor)},
        "histogram_auto": {"q": '"CUDA out of memory" | "NCCL error"', "histogram": "1"},
        "newest_page2": {"size": "100"},  # `after` is added from page 1 (search_after)
    }


def capture(client, token: str, params: dict) -> tuple[dict, list]:
    """One request through Django in this process: its JSON and every Elasticsearch request
    (indices, body) that log_search sent, to replay them to Elasticsearch directly."""
    import apps.logs.search as search

    calls = []
    original = search._search

    def recording(indices, body):
        calls.append((indices, json.loads(json.dumps(body))))
        return original(indices, body)

    search._search = recording
    try:
        response = client.get(SEARCH, params, HTTP_AUTHORIZATION=f"Bearer {token}")
    finally:
        search._search = original
    if response.status_code != 200:
        raise RuntimeError(f"in-process search {params}: {response.status_code} {response.content}")
    return response.json(), calls


def es_replay(es_http, calls: list) -> tuple[float, list]:
    started = time.perf_counter()
    bodies = []
    for path, payload in calls:
        response = es_http.post(
            path,
            params={"ignore_unavailable": "true", "allow_no_indices": "true"},
            content=payload,
            headers={"Content-Type": "application/json"},
        )
        bodies.append(response)
    took = (time.perf_counter() - started) * 1000
    for response in bodies:
        if response.status_code != 200:
            raise RuntimeError(f"Elasticsearch {response.status_code}: {response.text[:300]}")
    return took, [response.json() for response in bodies]


def check_same(name: str, api: dict, direct: list, size: int) -> None:
    """API and direct answers agree: total, hit ids in order, histogram counts."""
    first = direct[0]
    total = first["hits"]["total"]["value"]
    if api["total"] != total:
        raise AssertionError(f"{name}: API total {api['total']} != Elasticsearch total {total}")
    direct_ids = [hit["_id"] for hit in first["hits"]["hits"][:size]]
    if [hit["id"] for hit in api["hits"]] != direct_ids:
        raise AssertionError(f"{name}: API hits differ from Elasticsearch's")
    if api.get("histogram"):
        buckets = direct[-1]["aggregations"]["histogram"]["buckets"]
        if [b["count"] for b in api["histogram"]] != [b["doc_count"] for b in buckets]:
            raise AssertionError(f"{name}: histogram differs from Elasticsearch's")


def check_tenant(name: str, api: dict, mine: set[str], foreign: set[str]) -> None:
    for hit in api["hits"]:
        if hit["attempt"] in foreign:
            raise AssertionError(f"{name}: the other tenant's line {hit['id']} came back")
        if hit["attempt"] not in mine:
            raise AssertionError(f"{name}: unknown line {hit['id']} came back")


def floors(api_http, k: int, warmup: int) -> dict:
    """What every request pays before any search, over the same connection: `GET /healthz`
    (HTTP, ASGI, middleware; no auth, no database) and `GET /api/v1/logs/search/?size=0`
    (the same plus DRF, token authentication, throttle and parameter validation: a 400)."""
    out: dict[str, list] = {"healthz": [], "search_400": []}
    for i in range(warmup + k):
        for name, path in (("healthz", "/healthz"), ("search_400", f"{SEARCH}?size=0")):
            started = time.perf_counter()
            response = api_http.get(path)
            took = (time.perf_counter() - started) * 1000
            expected = 200 if name == "healthz" else 400
            if response.status_code != expected:
                raise RuntimeError(f"{path}: {response.status_code} {response.text[:200]}")
            if i >= warmup:
                out[name].append(took)
    result = {f"{name}_ms": percentiles(values) for name, values in out.items()}
    log(
        f"floors: /healthz p50 {result['healthz_ms']['p50']} ms, search 400 (auth, throttle, "
        f"validation) p50 {result['search_400_ms']['p50']} ms"
    )
    return result


def relay_floor(es_http, captured: dict, k: int, logdir: Path) -> dict:
    """Every query's recorded requests straight to Elasticsearch and through HAProxy in `mode
    http` in front of it (the connection kept on both sides), alternating: what one more HTTP
    hop costs here with no work of ours in it, beside what the API adds."""
    import httpx
    from django.conf import settings

    es_url = httpx.URL(settings.TORUS_ELASTICSEARCH_URL)
    proc, port = start_relay(es_url.port, logdir, mode="http", check="/_cluster/health")
    direct, relayed = [], []
    limits = httpx.Limits(max_keepalive_connections=1, max_connections=1)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits) as relay:
        for calls in captured.values():
            payloads = [
                (f"/{indices}/_search", json.dumps(body, separators=(",", ":")).encode())
                for indices, body in calls
            ]
            for i in range(k + 2):
                for side in ("es", "relay") if i % 2 == 0 else ("relay", "es"):
                    took, _ = es_replay(es_http if side == "es" else relay, payloads)
                    if i >= 2:
                        (direct if side == "es" else relayed).append(took)
    proc.stop()
    d, r = percentiles(direct), percentiles(relayed)
    out = {
        "direct_ms": d,
        "relay_ms": r,
        "relay_vs_es_p50": round(r["p50"] / d["p50"], 3),
        "relay_vs_es_p95": round(r["p95"] / d["p95"], 3),
    }
    log(f"one more hop (HAProxy): p50 {d['p50']} -> {r['p50']} ms, x{out['relay_vs_es_p50']}")
    return out


def measure(api_http, es_http, name, params, calls, k, warmup, size, mine, foreign) -> dict:
    payloads = [
        (f"/{indices}/_search", json.dumps(body, separators=(",", ":")).encode())
        for indices, body in calls
    ]
    api_ms, es_ms, es_took, api_took = [], [], [], []
    for i in range(warmup + k):
        order = ("api", "es") if i % 2 == 0 else ("es", "api")
        for side in order:
            if side == "api":
                started = time.perf_counter()
                response = api_http.get(SEARCH, params=params)
                took = (time.perf_counter() - started) * 1000
                if response.status_code != 200:
                    raise RuntimeError(f"{name}: API {response.status_code}: {response.text[:300]}")
                api = response.json()
                if i >= warmup:
                    api_ms.append(took)
                    api_took.append(api["took_ms"])
            else:
                took, direct = es_replay(es_http, payloads)
                if i >= warmup:
                    es_ms.append(took)
                    es_took.append(sum(body["took"] for body in direct))
        check_same(name, api, direct, size)
        check_tenant(name, api, mine, foreign)
    a, e = percentiles(api_ms), percentiles(es_ms)
    out = {
        "params": {key: value for key, value in params.items() if key != "after"}
        | ({"after": "<page 1 next>"} if "after" in params else {}),
        "es_requests": len(calls),
        "total": api["total"],
        "hits": len(api["hits"]),
        "api_ms": a,
        "es_ms": e,
        "es_took_ms": percentiles(es_took),
        "api_reported_took_ms": percentiles(api_took),
        "overhead_ms_p50": round(a["p50"] - e["p50"], 2),
        "api_vs_es_p50": round(a["p50"] / e["p50"], 3),
        "api_vs_es_p95": round(a["p95"] / e["p95"], 3),
        "_api": api_ms,
        "_es": es_ms,
    }
    log(
        f"{name:>20}: total {api['total']:>8,}  API p50 {a['p50']:7.2f} p95 {a['p95']:7.2f} ms"
        f"  | ES p50 {e['p50']:7.2f} p95 {e['p95']:7.2f} ms  (took p50 "
        f"{out['es_took_ms']['p50']})  x{out['api_vs_es_p50']}"
    )
    return out


def plain_http_ab(logdir, api_http, token, queries, k: int) -> dict:
    """The same API requests to the benchmark's uvicorn (the hot routes through Django's WSGI
    handler, apps/core/plain_http.py) and to a second one with TORUS_PLAIN_HTTP_THREADS=0
    (everything through Django's ASGI handler), alternating, in the same run."""
    import httpx

    other, port = start_web(logdir, name="web-asgi-only", env={"TORUS_PLAIN_HTTP_THREADS": "0"})
    times: dict[str, list] = {"wsgi": [], "asgi": []}
    limits = httpx.Limits(max_keepalive_connections=1, max_connections=1)
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        limits=limits,
    ) as asgi_http:
        clients = {"wsgi": api_http, "asgi": asgi_http}
        for i in range(k + 3):
            for name, params in queries.items():
                for side in ("wsgi", "asgi") if i % 2 == 0 else ("asgi", "wsgi"):
                    started = time.perf_counter()
                    response = clients[side].get(SEARCH, params=params)
                    took = (time.perf_counter() - started) * 1000
                    if response.status_code != 200:
                        raise RuntimeError(f"{side} {name}: {response.status_code}")
                    if i >= 3:
                        times[side].append(took)
    other.stop()
    out = {f"{side}_ms": percentiles(values) for side, values in times.items()}
    out["asgi_minus_wsgi_p50_ms"] = round(out["asgi_ms"]["p50"] - out["wsgi_ms"]["p50"], 2)
    log(f"plain HTTP A/B (all queries): {json.dumps(out)}")
    return out
