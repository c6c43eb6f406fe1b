"""A finished job's page shows the lines its logs endpoint has (issue 34, item 5): 20 short
jobs on the real Slurm cluster, each printing distinct lines as its last act (so it ends with
them not yet shipped, or just shipped), opened in headless Chromium (frontend/e2e/
job_logs.mjs) the moment the jobs list says each has ended. Every page must show all of its
job's lines, each once, and the same lines as GET /api/v1/jobs/{id}/logs/."""

import json
import os
import subprocess
import uuid

import pytest

from apps.tenancy.models import Role
from tests.conftest import bearer_client
from tests.e2e.conftest import FRONTEND, chromium_path, node_path, with_password

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = 20
SPACING = 1.2  # seconds between the jobs' ends: two pages keep up with them


def _script(word: str, k: int) -> tuple[str, list[str]]:
    """Job k's script (it waits, then prints and ends at once) and the lines it prints."""
    lines = [f"{word} j{k} {part}" for part in ("one", "two", "three")]
    error = f"{word} j{k} err"
    script = (
        f"sleep {2 + SPACING * k:.1f}; "
        + "; ".join(f'echo "{line}"' for line in lines)
        + f'; echo "{error}" >&2'
    )
    return script, [*lines, error]


def _run(params: dict) -> dict:
    env = {
        **os.environ,
        "TORUS_E2E_PARAMS": json.dumps(params),
        "CHROMIUM_PATH": chromium_path(),
    }
    result = subprocess.run(
        [*node_path(), str(FRONTEND / "e2e" / "job_logs.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0 and lines, (
        f"job_logs failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return json.loads(lines[-1])


def test_twenty_jobs_opened_as_they_end_each_show_their_lines(
    built_ui, asgi_server, acme, control_loop, shipper_loop
):
    from apps.jobs.models import Job

    word = f"w{uuid.uuid4().hex[:10]}"
    client = bearer_client(acme.tokens[Role.MEMBER])
    expected = {}
    for k in range(JOBS):
        script, lines = _script(word, k)
        response = client.post(
            "/api/v1/jobs/",
            {
                "project": str(acme.project.id),
                "name": f"{word}-{k}",
                "command": ["bash", "-c", script],
            },
            format="json",
        )
        assert response.status_code == 201, response.content
        expected[response.json()["id"]] = lines
    seen = _run(
        {
            "base": asgi_server.url,
            "user": with_password(acme.users[Role.MEMBER]),
            "word": word,
            "jobs": expected,
            "pages": 2,
        }
    )
    assert not seen["consoleErrors"], seen["consoleErrors"]
    failed = Job.objects.filter(pk__in=list(expected)).exclude(state="SUCCEEDED")
    assert not failed, [(job.name, job.state, job.state_reason) for job in failed]
    shown = seen["jobs"]
    assert set(shown) == set(expected)
    bad = {
        job: result
        for job, result in shown.items()
        if result["missing"] or result["count"] != f"{len(expected[job])} lines"
    }
    assert not bad, "\n".join(
        f"{job}: {len(r['found'])} found, {r['count']} shown, opened {r['openedMs']} ms after"
        f" its end, the socket sent {r['frames']}"
        for job, r in bad.items()
    )
    # how soon after its end each page opened (the race is likeliest within a second or
    # two; printed, not asserted: a loaded machine opens them later, and must pass still)
    opened = sorted(r["openedMs"] for r in shown.values())
    print(f"opened after the end (ms): median {opened[JOBS // 2]}, max {opened[-1]}")
    print("backlog sizes:", sorted(r["frames"][0] for r in shown.values() if r["frames"]))
    # what the page showed is what the logs endpoint has
    for job, lines in expected.items():
        out = client.get(f"/api/v1/jobs/{job}/logs/").json()
        err = client.get(f"/api/v1/jobs/{job}/logs/?stream=stderr").json()
        assert (out["data"] + err["data"]).splitlines() == lines
        assert out["complete"] and err["complete"]
