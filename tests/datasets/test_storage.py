"""POSIX storage in the tenant's tree: made by the root worker on the API's request (503 with a
code when none answers), read by the project's people and by nobody of another tenant."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from apps.identity.models import PosixGroup
from apps.identity.services import account_ensure, group_ensure
from apps.identity.storage import project_root
from apps.tenancy.models import Role
from tests.datasets.conftest import create_dataset, member, open_version, upload

ROOT = Path(__file__).resolve().parents[2]


def _cat_as(path, *, uid: int, gid: int, groups: list[int]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--groups=" + ",".join(str(g) for g in groups),
            "cat",
            str(path),
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )


def test_the_projects_people_read_a_version_and_another_tenants_cannot(acme_storage, globex):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    upload(client, dataset["id"], 1, "secret.txt", b"acme data")
    path = project_root(acme_storage.project) / "datasets" / dataset["id"] / "v1" / "secret.txt"

    insider = account_ensure(user=acme_storage.users[Role.MEMBER])
    tenant_gid = PosixGroup.objects.get(tenant=acme_storage.tenant, project=None).gid
    project_gid = PosixGroup.objects.get(project=acme_storage.project).gid
    allowed = _cat_as(path, uid=insider.uid, gid=insider.gid, groups=[tenant_gid, project_gid])
    assert allowed.returncode == 0 and allowed.stdout == b"acme data", allowed.stderr

    outsider = account_ensure(user=globex.users[Role.OWNER])
    globex_groups = [
        group_ensure(tenant=globex.tenant).gid,
        group_ensure(tenant=globex.tenant, project=globex.project).gid,
    ]
    refused = _cat_as(path, uid=outsider.uid, gid=outsider.gid, groups=globex_groups)
    assert refused.returncode != 0 and b"Permission denied" in refused.stderr
    # nor may a job of the same tenant outside the project
    same_tenant = account_ensure(user=acme_storage.users[Role.VIEWER])
    refused = _cat_as(path, uid=same_tenant.uid, gid=same_tenant.gid, groups=[tenant_gid])
    assert refused.returncode != 0


def test_the_api_has_the_worker_make_the_projects_storage(acme, celery_worker):
    area = project_root(acme.project) / "datasets"
    assert not area.exists()
    client = member(acme)
    dataset = create_dataset(client, acme.project)
    version = open_version(client, dataset["id"])  # waits for the worker
    assert version["number"] == 1
    assert area.is_dir() and (area.parent / "models").is_dir()


@pytest.mark.django_db(transaction=True)
def test_without_a_worker_opening_a_version_is_a_503_with_a_code(acme, settings):
    settings.TORUS_STORAGE_ENSURE_TIMEOUT = 1
    client = member(acme)
    dataset = create_dataset(client, acme.project)
    response = client.post(
        reverse("dataset-version-list", kwargs={"dataset_pk": dataset["id"]}), {}, format="json"
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "storage_unavailable"
    assert response["Retry-After"]
    assert not (project_root(acme.project) / "datasets").exists()


AS_PLATFORM = """
import os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
import django
django.setup()
from django.conf import settings
from apps.datasets.storage import storage_for
settings.TORUS_JOB_ROOT = sys.argv[1]
storage = storage_for("posix")
for key in sys.argv[2:]:
    try:
        upload = storage.begin_upload(key=key)
        storage.append(key=key, upload_id=upload, offset=0, chunks=[b"hello"])
        storage.finish_upload(key=key, upload_id=upload)
        storage.seal(prefix=key.rsplit("/", 1)[0])
        print(key, "written", storage.stat(key=key))
    except Exception as exc:
        print(key, "refused", type(exc).__name__)
"""


def test_the_unprivileged_web_account_writes_datasets_and_nothing_else(acme_storage, settings):
    """As the web process runs in production (the `torus` account, not root)."""
    root, tenant, project = settings.TORUS_JOB_ROOT, "acme", "acme-proj"
    result = subprocess.run(
        [
            "setpriv",
            "--reuid=torus",
            "--regid=torus",
            "--init-groups",
            sys.executable,
            "-c",
            AS_PLATFORM,
            root,
            f"{tenant}/{project}/datasets/d/v1/f",
            f"{tenant}/{project}/models/m/v1/f",
            f"{tenant}/{project}/jobs/x/f",
            f"{tenant}/{project}/datasets/d/v1/g",  # sealed by the first key meanwhile
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TORUS_JOB_ROOT": root},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{tenant}/{project}/datasets/d/v1/f written 5",
        f"{tenant}/{project}/models/m/v1/f written 5",
        f"{tenant}/{project}/jobs/x/f refused StorageError",
        f"{tenant}/{project}/datasets/d/v1/g refused Sealed",
    ]
