"""bench/submit.py's profile: one request, in-process, split by section."""

import json
import time

from _common import SectionTimer, percentiles
from _submit_slurm import log

# -- profile: one request, in-process, split by section ---------------------------------------


def profile_requests(ctx, k: int) -> dict:
    """k POSTs through Django's full stack in this process, timed by section, SQL counted."""
    from django.db import connection
    from rest_framework.test import APIClient

    import apps.jobs.admission as admission
    import apps.jobs.api.render as render
    import apps.jobs.api.views as views
    import apps.jobs.services as job_services
    import apps.jobs.submit_cache as submit_cache
    import apps.tenancy.authentication as authentication
    from apps.core.api.throttling import PrincipalRateThrottle

    timer = SectionTimer()
    totals, sql, statements = timer.totals, timer.sql, timer.statements
    timed, sql_wrapper = timer.timed, timer.sql_wrapper

    patches = [
        (authentication, "token_lookup"),
        (views, "validated"),
        (job_services, "jobs_create"),
        (job_services, "placements_fitting"),
        (job_services, "soonest"),
        (job_services, "normalise"),
        (submit_cache, "generations"),
        (admission, "admit_submitted"),
        (admission, "admit_tenant"),
        (admission, "_books"),
        (render, "job_detail"),
    ]
    saved = [(mod, name, getattr(mod, name)) for mod, name in patches]
    for mod, name, fn in saved:
        setattr(mod, name, timed(f"{mod.__name__.rsplit('.', 1)[-1]}.{name}", fn))
    detail_cls = views.JobDetailSerializer

    class TimedDetail(detail_cls):
        @property
        def data(self):
            return timed("response serializer", lambda: detail_cls.data.fget(self))()

    views.JobDetailSerializer = TimedDetail
    allow = PrincipalRateThrottle.allow_request
    PrincipalRateThrottle.allow_request = timed("throttle (redis)", allow)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ctx['token']}")
    wall = []
    try:
        with connection.execute_wrapper(sql_wrapper):
            for i in range(k):
                started = time.perf_counter()
                response = client.post(
                    "/api/v1/jobs/",
                    {
                        "project": str(ctx["project"].pk),
                        "name": f"bench-{i}",
                        "command": ["true"],
                        "resources": {"gpus_per_node": 0, "time_limit": 1},
                    },
                    format="json",
                )
                wall.append(time.perf_counter() - started)
                assert response.status_code == 201, response.content[:300]
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        views.JobDetailSerializer = detail_cls
        PrincipalRateThrottle.allow_request = allow
    per = {name: round(v / k * 1000, 2) for name, v in sorted(totals.items(), key=lambda x: -x[1])}
    queries = {
        name: {"queries": round(c / k, 1), "ms": round(s / k * 1000, 2)}
        for name, (c, s) in sql.items()
    }
    out = {
        "requests": k,
        "in_process_request_ms": percentiles([w * 1000 for w in wall]),
        "inclusive_ms_per_request": per,
        "sql_per_request_by_innermost_section": queries,
        "sql_queries_per_request": round(sum(c for c, _ in sql.values()) / k, 1),
        "sql_ms_per_request": round(sum(s for _, s in sql.values()) / k * 1000, 2),
        "top_sql_ms_per_request": {
            q: {"n": round(c / k, 1), "ms": round(s / k * 1000, 2)}
            for q, (c, s) in sorted(statements.items(), key=lambda x: -x[1][1])[:12]
        },
    }
    log(f"profile ({k} in-process requests): {json.dumps(out)}")
    return out
