"""bench/search.py's profile: where an API request's time goes, in-process."""

import json
import time

from _common import SectionTimer, percentiles
from _search_data import SEARCH, log

# -- profile: where an API request's time goes (in-process) ------------------------------------


def handler_comparison(token: str, queries: dict, k: int) -> dict:
    """The same requests in this process through Django's test Client (the sync handler, as
    under WSGI) and its AsyncClient (the ASGI handler uvicorn runs), alternately: the ASGI
    handler's own share of the overhead, without HTTP or a second process."""
    import asyncio

    from django.test import AsyncClient, Client

    sync_client, async_client = Client(), AsyncClient()
    loop = asyncio.new_event_loop()
    walls: dict[str, list] = {"sync_handler": [], "asgi_handler": []}
    try:
        for params in queries.values():
            for i in range(k):
                for name in ("sync_handler", "asgi_handler")[:: 1 if i % 2 == 0 else -1]:
                    started = time.perf_counter()
                    if name == "sync_handler":
                        response = sync_client.get(
                            SEARCH, params, HTTP_AUTHORIZATION=f"Bearer {token}"
                        )
                    else:
                        response = loop.run_until_complete(
                            async_client.get(
                                SEARCH, params, headers={"Authorization": f"Bearer {token}"}
                            )
                        )
                    walls[name].append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200, response.content[:300]
    finally:
        loop.close()
    out = {f"{name}_ms": percentiles(values) for name, values in walls.items()}
    out["asgi_minus_sync_p50_ms"] = round(
        out["asgi_handler_ms"]["p50"] - out["sync_handler_ms"]["p50"], 2
    )
    log(f"in-process handlers: {json.dumps(out)}")
    return out


def profile_requests(token: str, queries: dict, k: int) -> dict:
    """k requests per query through Django's full stack in this process, timed by section
    (inclusive), every SQL statement counted and timed."""
    from django.db import connection
    from django.test import Client

    import apps.logs.api.views as views
    import apps.logs.search as search
    import apps.tenancy.authentication as authentication
    from apps.core.api.renderers import JSONRenderer
    from apps.core.api.throttling import PrincipalRateThrottle

    timer = SectionTimer()
    totals, sql, timed, sql_wrapper = timer.totals, timer.sql, timer.timed, timer.sql_wrapper
    es_took = []

    def search_recording(indices, body):
        result = original_search(indices, body)
        es_took.append(result.get("took", 0))
        return result

    original_search = search._search
    patches = [
        (authentication, "token_lookup", None),
        (views, "actor_for", None),
        (views, "log_search", "log_search (all)"),
        (search, "_tenant_scope", None),
        (search, "_object_filters", None),
        (search, "_search", "_search (Elasticsearch round trip)"),
        (search, "_line", "_line (per hit, summed)"),
        (views.LogSearchQuerySerializer, "is_valid", "params serializer"),
        (authentication.BearerTokenAuthentication, "_record_use", None),
        (PrincipalRateThrottle, "allow_request", "throttle (redis)"),
        (JSONRenderer, "render", "JSON render"),
    ]
    saved = []
    for owner, attr, label in patches:
        own = attr in vars(owner)
        fn = vars(owner)[attr] if own else getattr(owner, attr)
        saved.append((owner, attr, own, fn))
        wrapped = search_recording if attr == "_search" else fn
        is_static = isinstance(fn, staticmethod)
        if is_static:
            wrapped = fn.__func__
        new = timed(label or f"{attr}", wrapped)
        setattr(owner, attr, staticmethod(new) if is_static else new)
    client = Client()
    per_query = {}
    all_wall = []
    try:
        with connection.execute_wrapper(sql_wrapper):
            for name, params in queries.items():
                wall = []
                for _ in range(k):
                    started = time.perf_counter()
                    response = client.get(SEARCH, params, HTTP_AUTHORIZATION=f"Bearer {token}")
                    wall.append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200, response.content[:300]
                per_query[name] = percentiles(wall)["p50"]
                all_wall += wall
    finally:
        for owner, attr, own, fn in saved:
            if own:
                setattr(owner, attr, fn)
            else:
                delattr(owner, attr)
    n = k * len(queries)
    per = {name: round(v / n * 1000, 2) for name, v in sorted(totals.items(), key=lambda x: -x[1])}
    wall_mean = sum(all_wall) / n
    es_round_trip = per.get("_search (Elasticsearch round trip)", 0.0)
    took = sum(es_took) / n
    out = {
        "requests": n,
        "split_ms_per_request": {
            "elasticsearch_took": round(took, 2),
            "elasticsearch_client_http_and_json": round(es_round_trip - took, 2),
            "outside_elasticsearch": round(wall_mean - es_round_trip, 2),
            "of_which_sql": round(sum(s for _, s in sql.values()) / n * 1000, 2),
        },
        "in_process_request_ms": percentiles(all_wall),
        "in_process_request_ms_p50_by_query": per_query,
        "inclusive_ms_per_request": per,
        "es_took_ms_per_request": round(sum(es_took) / n, 2),
        "sql_per_request_by_innermost_section": {
            name: {"queries": round(c / n, 2), "ms": round(s / n * 1000, 2)}
            for name, (c, s) in sql.items()
        },
        "sql_queries_per_request": round(sum(c for c, _ in sql.values()) / n, 2),
        "sql_ms_per_request": round(sum(s for _, s in sql.values()) / n * 1000, 2),
    }
    log(f"profile ({n} in-process requests): {json.dumps(out)}")
    return out
