"""Archive and restore a project in headless Chromium against the real backend (frontend/e2e/
archive.mjs): the admin console's Archive dialog sends nothing until the project's slug is
typed exactly, the archived project leaves the list and shows under "Show archived" with its
badge, an admin restores it there, a member sees no Restore; the dialog passes axe in English
and Chinese. What the page did is checked in the database and the audit log."""

import json
import os
import subprocess

import pytest

from apps.jobs.models import Job
from apps.tenancy.models import AuditEvent, Project, Role
from tests.e2e.conftest import FRONTEND, SCREENSHOTS, chromium_path, node_path, with_password
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)


def run_archive_scenario(params: dict) -> dict:
    SCREENSHOTS.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "TORUS_E2E_PARAMS": json.dumps(params),
        "CHROMIUM_PATH": chromium_path(),
        "TORUS_E2E_SCREENSHOTS": str(SCREENSHOTS),
    }
    result = subprocess.run(
        [*node_path(), str(FRONTEND / "e2e" / "archive.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0 and lines, (
        f"archive scenario failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return json.loads(lines[-1])


def test_admin_archives_a_project_by_typing_its_slug_and_restores_it(
    built_ui, asgi_server, acme, cluster
):
    project = acme.project
    # history: a finished job, so the project could not simply be deleted
    job = make_job(
        project=project, user=acme.users[Role.MEMBER], state="SUCCEEDED", cluster=cluster
    )
    seen = run_archive_scenario(
        {
            "base": asgi_server.url,
            "project": project.slug,
            "users": {
                role.value: with_password(acme.users[role]) for role in (Role.ADMIN, Role.MEMBER)
            },
        }
    )
    slug = project.slug
    # the Archive button: disabled empty, with the slug in capitals and with part of it
    assert seen["disabledEmpty"] and seen["disabledWrong"] and seen["disabledPrefix"]
    assert seen["enabledTyped"]
    assert seen["beforeArchive"] == {"live": [slug], "archived": []}
    assert seen["afterArchive"] == {"live": [], "archived": [slug]}
    assert seen["badge"] == "Archived"
    assert seen["memberRestore"] == 0
    assert seen["afterRestore"] == {"live": [slug], "archived": []}
    assert seen["archiveAgainShown"]
    for name in ("archive-dialog.en", "archive-dialog.zh", "projects-archived.en"):
        assert name in seen["axe"]

    # archived once and restored once, both by the admin; the job and the project are there
    project.refresh_from_db()
    assert project.archived_at is None and Job.objects.filter(pk=job.pk).exists()
    events = AuditEvent.objects.filter(target_id=str(project.pk)).order_by("created_at")
    lifecycle = [(e.action, e.actor_id) for e in events if e.action.startswith("project.")]
    admin = acme.users[Role.ADMIN].pk
    assert lifecycle == [("project.archive", admin), ("project.restore", admin)]
    assert Project.objects.filter(tenant=acme.tenant).count() == 1
