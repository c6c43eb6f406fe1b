"""The UI end to end in headless Chromium against the real backend (conftest.py): sign in,
submit from the form, live log lines, success, loss curve, log search; the viewer's missing
actions; the admin console; every main page in English and Chinese, screenshotted and
checked with axe-core (no serious or critical violation)."""

import uuid

import pytest

from apps.tenancy.models import Role
from tests.e2e.conftest import run_browser, with_password
from tests.factories import make_job


@pytest.fixture
def browser_params(built_ui, asgi_server, acme):
    return {
        "base": asgi_server.url,
        "project": acme.project.slug,
        "users": {
            role.value: with_password(acme.users[role])
            for role in (Role.ADMIN, Role.MEMBER, Role.VIEWER)
        },
    }


def test_researcher_submits_follows_and_finds_a_job(
    browser_params, acme, control_loop, shipper_loop
):
    from apps.jobs.models import Job
    from apps.logs.models import JobMetric

    word = f"w{uuid.uuid4().hex[:10]}"
    seen = run_browser(
        "researcher",
        {**browser_params, "word": word, "jobName": "e2e-train", "steps": 12, "sleep": 0.25},
    )
    job = Job.objects.get(pk=seen["jobId"])
    assert (job.name, job.state, job.user.username) == ("e2e-train", "SUCCEEDED", "acme-member")
    assert seen["logCount"] == "25 lines"  # 12 ticks, 12 metric lines, the error line
    assert JobMetric.objects.filter(job=job).count() == 12
    assert int(seen["searchTotal"].split()[0]) == 13  # the ticks and the error line
    for page in ("home", "submit", "jobs", "logs", "job-logs"):
        assert f"{page}.en" in seen["pages"] and f"{page}.zh" in seen["pages"]


def test_viewer_sees_no_action_they_may_not_take(browser_params, acme):
    job = make_job(project=acme.project, user=acme.users[Role.MEMBER], state="FAILED")
    seen = run_browser("viewer", {**browser_params, "jobId": str(job.pk)})
    assert seen["viewerOk"]


def test_admin_raises_a_quota_and_the_waiting_job_starts(
    browser_params, acme, control_loop, shipper_loop
):
    from apps.jobs.models import Job
    from apps.quotas.models import Quota
    from tests.conftest import bearer_client

    quota = Quota.objects.create(tenant=acme.tenant, project=acme.project, running_jobs=0)
    response = bearer_client(acme.tokens[Role.MEMBER]).post(
        "/api/v1/jobs/",
        {"project": str(acme.project.id), "name": "waits", "command": ["sleep", "1"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    seen = run_browser("quota", {**browser_params, "jobId": job_id})
    assert "0 of 0 jobs running" in seen["waitingSaid"]
    quota.refresh_from_db()
    assert quota.running_jobs == 1
    assert Job.objects.get(pk=job_id).state in {"SUBMITTED", "RUNNING", "SUCCEEDED"}


def test_admin_console_and_catalogue_in_both_languages(browser_params):
    seen = run_browser("admin", browser_params)
    sections = ("members", "invitations", "projects", "quotas", "tokens", "audit", "signatures")
    pages = {f"admin-{s}" for s in sections} | {"datasets", "models", "clusters"}
    assert {f"{page}.{lang}" for page in pages for lang in ("en", "zh")} <= set(seen["pages"])
