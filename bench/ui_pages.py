"""The browser UI's speed in the same headless Chromium the e2e tests use (bench/ui/bench.mjs):
the jobs page with 10,000 jobs in the project (time to interactive, bytes of the first load),
SQL queries per jobs-list request at two page sizes, and the live log view fed 2,000 lines/s
(frame times, dropped frames) then holding 1,000,000 lines (JS heap).

Peers in the same run: the jobs API request the page makes, timed from the same browser
(`fetch`), and a naive log view (lines appended to a <pre>, what a dashboard without
virtualisation does) fed the same stream. The last stdout line is the JSON result.

    .venv/bin/python bench/ui_pages.py [--quick] [--jobs 10000] [--keep-logs]
"""

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ENV, ROOT, django_setup, ensure_tenant, finish, log, manage

from scripts.devstack import start_web, stop_all

NAME = "ui_pages"
FRONTEND = ROOT / "frontend"


def ensure_jobs(ctx: dict, count: int) -> int:
    """`count` finished jobs in the bench project (bulk-made once, kept between runs)."""
    from apps.jobs.models import Job
    from apps.jobs.spec import JobSpecSerializer, normalise, totals

    project, user = ctx["project"], ctx["user"]
    have = Job.objects.filter(project=project).count()
    if have >= count:
        return have
    data = {"project": str(project.id), "name": "bench", "command": ["true"]}
    serializer = JobSpecSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    spec = normalise(dict(serializer.validated_data))
    states = ["SUCCEEDED", "FAILED", "CANCELLED", "SUCCEEDED", "TIMEOUT"]
    rows = [
        Job(
            tenant=project.tenant,
            project=project,
            user=user,
            name=f"bench-{i:05d}",
            spec=spec,
            state=states[i % len(states)],
            partition="debug",
            priority=i % 7,
            labels={},
            **totals(spec),
        )
        for i in range(have, count)
    ]
    Job.objects.bulk_create(rows, batch_size=2000)
    return count


def query_counts(ctx: dict) -> dict:
    """SQL statements per GET /api/v1/jobs/ at page sizes 25 and 500 (constant is the aim)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(ctx["user"])
    out = {}
    for size in (25, 500):
        url = f"/api/v1/jobs/?project={ctx['project'].id}&page_size={size}"
        client.get(url)  # warm
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        assert response.status_code == 200, response.content[:300]
        out[f"page_size_{size}"] = len(captured.captured_queries)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 page loads, 5 s of feed")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--keep-logs", action="store_true")
    args, _ = parser.parse_known_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    index = FRONTEND / "dist" / "index.html"
    if not chromium or not index.is_file():
        log(NAME, "needs Debian's chromium and the built UI: run `make ui-test ui` first")
        return 2
    logdir = Path(tempfile.mkdtemp(prefix="torus-ui-bench-"))
    try:
        manage("migrate", "--noinput", "--verbosity", "0")
        manage("collectstatic", "--noinput", "--verbosity", "0")
        django_setup()
        ctx = ensure_tenant(
            slug="bench-ui", project_slug="jobs", owner="bench-ui-owner", token_name="ui"
        )
        password = secrets.token_urlsafe(12)
        ctx["user"].set_password(password)
        ctx["user"].save(update_fields=["password"])
        jobs = ensure_jobs(ctx, args.jobs)
        log(NAME, f"{jobs} jobs in bench-ui/jobs")
        queries = query_counts(ctx)
        _web, port = start_web(logdir, workers=1)
        params = {
            "base": f"http://127.0.0.1:{port}",
            "user": {"username": ctx["user"].username, "password": password},
            "tenant": str(ctx["tenant"].id),
            "project": str(ctx["project"].id),
            "loads": 3 if args.quick else 7,
            "rate": 2000,
            "seconds": 5 if args.quick else 10,
            "hold": 1_000_000,
        }
        env = {**ENV, "CHROMIUM_PATH": chromium, "TORUS_BENCH_PARAMS": json.dumps(params)}
        node = [str(FRONTEND / "scripts" / "node.sh"), "node", str(ROOT / "bench/ui/bench.mjs")]
        result = subprocess.run(  # noqa: S603
            node, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        sys.stderr.write(result.stderr[-3000:])
        if result.returncode != 0 or not result.stdout.strip():
            log(NAME, f"browser run failed ({result.returncode})")
            return finish(NAME, None, logdir=logdir, keep_logs=True)
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        stop_all()
    metrics = {"jobs_in_project": jobs, "sql_queries_per_jobs_request": queries, **seen["metrics"]}
    peers = seen["peers"]
    ratios = {
        "jobs_page_tti_vs_api_request_p50": round(
            metrics["jobs_page_tti_ms"]["p50"] / max(peers["jobs_api_request_ms"]["p50"], 0.1), 1
        ),
        "log_view_p95_frame_vs_naive_pre": round(
            metrics["log_view_frame_ms"]["p95"] / max(peers["naive_pre_frame_ms"]["p95"], 0.1), 2
        ),
    }
    result = {"benchmark": NAME, "metrics": metrics, "peers": peers, "ratios": ratios}
    return finish(NAME, result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
