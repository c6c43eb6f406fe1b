"""The UI end to end in headless Chromium against the real backend (conftest.py): sign in,
submit from the form, live log lines, success, loss curve, log search; the viewer's missing
actions; a waiting job started by a raised quota, seen live in an untouched jobs list; an
interrupted dataset upload resumed; a project secret set through a field that never shows it;
the admin console; every main page and the dataset and model panels in English and Chinese,
screenshotted and checked with axe-core (no serious or critical violation)."""

import hashlib
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
    from apps.logs.usage import STREAM as USAGE

    word = f"w{uuid.uuid4().hex[:10]}"
    seen = run_browser(
        "researcher",
        {**browser_params, "word": word, "jobName": "e2e-train", "steps": 12, "sleep": 0.25},
    )
    job = Job.objects.get(pk=seen["jobId"])
    assert (job.name, job.state, job.user.username) == (
        "e2e-train",
        "SUCCEEDED",
        acme.users[Role.MEMBER].username,
    )
    assert seen["logCount"] == "25 lines"  # 12 ticks, 12 metric lines, the error line
    assert JobMetric.objects.filter(job=job).exclude(stream=USAGE).count() == 12
    assert int(seen["searchTotal"].split()[0]) == 13  # the ticks and the error line
    for page in ("home", "submit", "jobs", "logs", "job-logs"):
        assert f"{page}.en" in seen["pages"] and f"{page}.zh" in seen["pages"]


def test_keyboard_alone_local_times_and_an_ended_session(browser_params, acme, cluster):
    from datetime import datetime, timedelta

    from apps.jobs.models import Job

    seen = run_browser("people", {**browser_params, "jobName": "by-keys"})
    job = Job.objects.get(pk=seen["jobId"])
    assert (job.name, job.project_id, job.spec["command"]) == (
        "by-keys",
        acme.project.pk,
        {"script": "true"},
    )
    shown = datetime.strptime(seen["createdShown"], "%Y-%m-%d %H:%M:%S")
    utc = job.created_at.replace(tzinfo=None, microsecond=0)
    assert shown - utc == timedelta(hours=5, minutes=30)  # Asia/Kolkata, not the server's UTC
    assert seen["expiredSaid"] == "Your session has ended: sign in again."


def test_viewer_sees_no_action_they_may_not_take(browser_params, acme):
    from apps.jobs.models import JobAttempt
    from apps.logs.models import FailureSignature, SignatureMatch
    from apps.secrets.services import secret_set
    from apps.tenancy.access import actor_for_user

    job = make_job(project=acme.project, user=acme.users[Role.MEMBER], state="FAILED")
    # its failed attempt matched a signature (the row apps/logs/signatures.py writes)
    attempt = JobAttempt.objects.create(job=job, number=1, state="FAILED")
    oom = FailureSignature.objects.create(tenant=acme.tenant, name="oom", query="CUDA")
    SignatureMatch.objects.create(signature=oom, job=job, attempt=attempt, lines=1)
    admin = actor_for_user(user=acme.users[Role.ADMIN])
    secret_set(actor=admin, project=acme.project, name="HF_TOKEN", value="hf_e2e")
    seen = run_browser(
        "viewer",
        {**browser_params, "jobId": str(job.pk), "signature": "oom", "secretName": "HF_TOKEN"},
    )
    assert seen["viewerOk"]
    assert seen["tagFilter"] == "oom" and "jobs-tagged.en" in seen["pages"]


def test_member_sets_a_secret_the_page_never_shows(browser_params, acme):
    from apps.secrets.crypto import decrypt
    from apps.secrets.models import ProjectSecret

    value = f"hf_{uuid.uuid4().hex}"
    seen = run_browser(
        "secrets", {**browser_params, "secretName": "HF_TOKEN", "secretValue": value}
    )
    stored = ProjectSecret.objects.get(project=acme.project, name="HF_TOKEN")
    assert decrypt(stored.ciphertext) == value and value not in stored.ciphertext
    assert stored.updated_by == acme.users[Role.MEMBER]
    assert seen["secondDialogValue"] == "" and seen["pageHasValue"] is False
    assert {"admin-secrets-dialog.en"} <= set(seen["pages"])


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
    # the untouched list tab learnt it over /ws/tenants/{id}/jobs/: no poll, a refetch per burst
    assert seen["listStateAfter"] in {"QUEUED", "SUBMITTED", "RUNNING", "SUCCEEDED"}
    assert 1 <= seen["listRefetches"] <= 6
    quota.refresh_from_db()
    assert quota.running_jobs == 1
    assert Job.objects.get(pk=job_id).state in {"SUBMITTED", "RUNNING", "SUCCEEDED"}


def test_admin_console_and_catalogue_in_both_languages(browser_params):
    seen = run_browser("admin", browser_params)
    sections = (
        "members",
        "invitations",
        "projects",
        "quotas",
        "tokens",
        "audit",
        "signatures",
        "secrets",
    )
    pages = {f"admin-{s}" for s in sections} | {"datasets", "models", "clusters"}
    assert {f"{page}.{lang}" for page in pages for lang in ("en", "zh")} <= set(seen["pages"])


def test_an_interrupted_upload_resumes_and_the_catalogue_panels_pass_axe(
    browser_params, acme, models_area, tmp_path
):
    """The connection drops after the first 8 MiB chunk (the browser aborts the rest): the
    upload stops uncommitted; after a reload the same file resumes at the server's offset."""
    from apps.datasets.models import DatasetFile, DatasetVersion
    from apps.datasets.tasks import project_storage_ensure
    from tests.conftest import bearer_client

    project_storage_ensure(str(acme.project.pk))
    member = bearer_client(acme.tokens[Role.MEMBER])
    dataset = member.post(
        "/api/v1/datasets/", {"project": str(acme.project.id), "name": "images"}, format="json"
    )
    assert dataset.status_code == 201, dataset.content
    model = member.post(
        "/api/v1/models/", {"project": str(acme.project.id), "name": "resnet"}, format="json"
    ).json()
    number = member.post(f"/api/v1/models/{model['id']}/versions/", {}, format="json").json()
    url = f"/api/v1/models/{model['id']}/versions/{number['number']}"
    put = member.put(f"{url}/files/w.bin/?offset=0", b"w", content_type="application/octet-stream")
    assert put.status_code == 200, put.content
    assert member.post(f"{url}/commit/").status_code == 200
    alias = member.put(
        f"/api/v1/models/{model['id']}/aliases/production/", {"version": 1}, format="json"
    )
    assert alias.status_code == 200, alias.content  # the panel shows the move, checked by axe

    data = hashlib.shake_256(b"torus e2e upload").digest(20 * 1024 * 1024 + 123)
    upload = tmp_path / "big.bin"
    upload.write_bytes(data)
    seen = run_browser("catalogue", {**browser_params, "uploadFile": str(upload)}, timeout=400)

    assert "Failed to fetch" in seen["stopped"] or "fetch" in seen["stopped"].lower()
    offsets = [int(o) for o in seen["resumedOffsets"]]
    assert offsets and offsets[0] == 8 * 1024 * 1024  # resumed where the server's copy ended
    assert 0 not in offsets  # nothing sent twice
    version = DatasetVersion.objects.get(dataset_id=dataset.json()["id"])  # the same, one
    assert version.state == "committed" and version.number == 1
    stored = DatasetFile.objects.get(version=version)
    assert (stored.path, stored.size) == ("big.bin", len(data))
    assert stored.sha256 == hashlib.sha256(data).hexdigest()
    for panel in ("dataset-panel", "model-panel"):
        assert {f"{panel}.en", f"{panel}.zh"} <= set(seen["pages"])
    assert "dataset-panel-unfinished.en" in seen["pages"]
