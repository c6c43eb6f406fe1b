"""Bad input: traversal in every path a client names (file paths, registered directories) is
a 400 and nothing is read or written outside the tree, proved with a canary file outside it;
an interrupted upload leaves no committed version; two commits at once leave exactly one."""

import os
import threading
from pathlib import Path

import pytest
from django.db import connection
from django.urls import reverse

from apps.datasets.errors import DatasetConflict
from apps.datasets.models import DatasetFile, DatasetVersion
from apps.datasets.versions import version_commit
from apps.identity.storage import project_root, tenant_root
from apps.tenancy.models import Role
from tests.datasets.conftest import (
    commit,
    create_dataset,
    member,
    open_version,
    put_chunk,
    upload,
    version_url,
)

BAD_FILE_PATHS = [
    "../canary",
    "../../../canary",
    "a/../../canary",
    "/etc/passwd",
    "%2e%2e/canary",
    "%252e%252e/canary",
    "..%2fcanary",
    "a\\..\\canary",
    "a/\x00b",
    "./a",
    "a//b",
    "a/",
    "file:///etc/passwd",
    "s3://bucket/key",
    "http://example.org/x",
]


@pytest.fixture
def canary(acme_storage):
    """A file beside the tenant's tree, and another tenant's tree: neither may change."""
    outside = Path(os.path.dirname(tenant_root(acme_storage.tenant))) / "canary"
    outside.write_bytes(b"canary")
    return outside


def _files_outside(root: Path, ignore: Path) -> dict:
    return {
        str(p): p.stat().st_mtime_ns
        for p in root.rglob("*")
        if p.is_file() and ignore not in p.parents
    }


@pytest.mark.parametrize("path", BAD_FILE_PATHS)
def test_traversal_in_a_file_path_is_refused_and_nothing_outside_is_touched(
    acme_storage, canary, path
):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    root = Path(os.path.dirname(tenant_root(acme_storage.tenant)))
    datasets_area = project_root(acme_storage.project) / "datasets"
    before = _files_outside(root, datasets_area)

    response = put_chunk(client, dataset["id"], 1, path, b"evil", offset=0, total=4)
    assert response.status_code == 400, response.content
    assert "path" in response.json()["error"]["fields"]
    for name in ("upload", "download"):
        got = client.get(version_url(name, dataset["id"], 1), {"path": path})
        assert got.status_code == 400, (name, got.content)

    assert canary.read_bytes() == b"canary"
    assert _files_outside(root, datasets_area) == before
    assert not DatasetFile.objects.exists()


def test_register_copies_a_directory_of_the_project(acme_storage):
    source = project_root(acme_storage.project) / "jobs" / "out"
    (source / "sub").mkdir(parents=True)
    (source / "a.txt").write_bytes(b"a")
    (source / "sub" / "b.txt").write_bytes(b"bb")
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    response = client.post(
        version_url("register", dataset["id"], 1), {"path": str(source)}, format="json"
    )
    assert response.status_code == 200, response.content
    assert (response.json()["file_count"], response.json()["size_bytes"]) == (2, 3)
    assert commit(client, dataset["id"], 1).status_code == 200
    (source / "a.txt").write_bytes(b"changed")  # the version keeps its own copy
    assert client.post(version_url("verify", dataset["id"], 1)).json()["ok"] is True


def test_register_refuses_paths_outside_the_projects_tree(acme_storage, globex, canary):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    project_dir = project_root(acme_storage.project)
    inside = project_dir / "jobs" / "data"
    inside.mkdir(parents=True)
    (inside / "ok.txt").write_bytes(b"ok")
    # a symlink out of the tree, a directory that is one, and another tenant's tree
    (inside / "leak").symlink_to(canary)
    escape = project_dir / "jobs" / "escape"
    escape.symlink_to(canary.parent)
    globex_dir = tenant_root(globex.tenant) / "globex-proj"
    globex_dir.mkdir(parents=True)
    url = version_url("register", dataset["id"], 1)
    cases = [
        str(inside),  # contains a symlink leading out
        str(escape),
        str(canary.parent),
        str(globex_dir),
        str(project_dir / "jobs" / ".." / ".." / ".."),
        str(inside).replace("/data", "/%2e%2e/%2e%2e/data"),
        "jobs/data",
        f"file://{inside}",
        f"s3://bucket{inside}",
        str(inside) + "\\..\\..",
    ]
    for path in cases:
        response = client.post(url, {"path": path}, format="json")
        assert response.status_code == 400, (path, response.content)
        assert "path" in response.json()["error"]["fields"], path
    assert not DatasetFile.objects.exists()
    assert canary.read_bytes() == b"canary"


def test_an_interrupted_upload_leaves_no_committed_version(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    upload(client, dataset["id"], 1, "whole", b"w" * 100)
    partial = put_chunk(client, dataset["id"], 1, "big", b"x" * 10, offset=0, total=1000)
    assert partial.json() == {"path": "big", "offset": 10, "complete": False, "file": None}
    response = commit(client, dataset["id"], 1)
    assert response.status_code == 409 and response.json()["error"]["code"] == "uploads_pending"
    assert DatasetVersion.objects.get(dataset_id=dataset["id"]).state == "open"
    # a wrong offset is refused with where to continue
    wrong = put_chunk(client, dataset["id"], 1, "big", b"y", offset=5, total=1000)
    assert wrong.status_code == 409
    assert wrong.json()["error"] | {"message": ""} == {
        "code": "offset_mismatch",
        "message": "",
        "fields": {},
        "offset": 10,
    }
    # dropping the upload lets the rest be committed, without it
    client.delete(version_url("upload", dataset["id"], 1) + "?path=big")
    assert commit(client, dataset["id"], 1).json()["file_count"] == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_commits_leave_exactly_one(acme):
    from apps.datasets.tasks import project_storage_ensure

    project_storage_ensure(str(acme.project.pk))
    client = member(acme)
    dataset = create_dataset(client, acme.project)
    open_version(client, dataset["id"])
    upload(client, dataset["id"], 1, "f", b"data")
    version = DatasetVersion.objects.get(dataset_id=dataset["id"])
    barrier, results = threading.Barrier(4), []

    def commit_once():
        try:
            barrier.wait()
            version_commit(actor=None, version=version)
            results.append("committed")
        except DatasetConflict as exc:
            results.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=commit_once) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["committed"] + ["version_committed"] * 3
    version.refresh_from_db()
    assert version.state == "committed"
    from apps.tenancy.models import AuditEvent

    assert AuditEvent.objects.filter(action="dataset.version.commit").count() == 1


def test_a_viewer_cannot_upload_or_commit(acme_storage):
    dataset = create_dataset(member(acme_storage), acme_storage.project)
    open_version(member(acme_storage), dataset["id"])
    viewer = acme_storage.client(Role.VIEWER)
    assert put_chunk(viewer, dataset["id"], 1, "f", b"x", offset=0, total=1).status_code == 403
    assert commit(viewer, dataset["id"], 1).status_code == 403
    listing = viewer.get(reverse("dataset-version-list", kwargs={"dataset_pk": dataset["id"]}))
    assert listing.status_code == 200


def test_a_file_cannot_also_be_a_directory(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    upload(client, dataset["id"], 1, "a/b", b"1")
    for path in ("a", "a/b/c"):
        response = put_chunk(client, dataset["id"], 1, path, b"x", offset=0, total=1)
        assert response.status_code == 409, path
        assert response.json()["error"]["code"] == "path_clash"


def test_register_refuses_hard_links(acme_storage):
    source = project_root(acme_storage.project) / "jobs" / "linked"
    source.mkdir(parents=True)
    (source / "a").write_bytes(b"a")
    os.link(source / "a", source / "b")
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    response = client.post(
        version_url("register", dataset["id"], 1), {"path": str(source)}, format="json"
    )
    assert response.status_code == 400
    assert "hard links" in response.json()["error"]["fields"]["path"][0]


def test_a_second_writer_of_the_same_upload_is_refused(acme_storage):
    import fcntl

    from apps.datasets.storage import storage_for
    from apps.datasets.storage.base import UploadOffsetMismatch

    storage = storage_for("posix")
    key = f"{acme_storage.tenant.slug}/{acme_storage.project.slug}/datasets/{'d' * 8}/v1/f"
    upload = storage.begin_upload(key=key)
    storage.append(key=key, upload_id=upload, offset=0, chunks=[b"12"])
    path = project_root(acme_storage.project) / "datasets" / ".uploads" / upload
    with open(path, "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a request still writing
        with pytest.raises(UploadOffsetMismatch) as excinfo:
            storage.append(key=key, upload_id=upload, offset=2, chunks=[b"34"])
        assert excinfo.value.stored == 2
    assert storage.append(key=key, upload_id=upload, offset=2, chunks=[b"34"]) == 4
