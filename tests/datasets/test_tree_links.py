"""Registering a directory of the tree as a dataset version reads it through the one reader of
tenants' trees (apps/identity/tree.py): a link as a PARENT of the path is refused (400 naming
it, nothing written) even where it stays inside the project, and a directory swapped for a
link between the listing and the copy is not followed; the real directory registers."""

import pytest

from apps.datasets import directories
from apps.datasets.models import DatasetFile, DatasetVersion
from apps.identity.storage import project_root, tenant_root
from tests.datasets.conftest import create_dataset, member, open_version, version_url


@pytest.fixture
def source(acme_storage):
    path = project_root(acme_storage.project) / "jobs" / "out"
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "a.txt").write_bytes(b"a")
    return path


def test_a_linked_parent_is_refused_and_the_real_directory_registers(acme_storage, globex, source):
    theirs = tenant_root(globex.tenant) / "proj" / "data"
    theirs.mkdir(parents=True)
    (theirs / "secret.txt").write_bytes(b"globex secret")
    jobs = source.parent
    (jobs / "alias").symlink_to(source)  # inside the project, still a link
    (jobs / "theirs").symlink_to(theirs.parent)  # into another tenant's tree
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    url = version_url("register", dataset["id"], 1)
    for path, named in ((jobs / "alias" / "sub", "alias"), (jobs / "theirs" / "data", "")):
        response = client.post(url, {"path": str(path)}, format="json")
        assert response.status_code == 400, (path, response.content)
        [message] = response.json()["error"]["fields"]["path"]
        assert named in message and "link" in message, message
    assert not DatasetFile.objects.exists()
    response = client.post(url, {"path": str(source / "sub")}, format="json")  # control
    assert response.status_code == 200, response.content
    assert list(DatasetFile.objects.values_list("path", "size")) == [("a.txt", 1)]


def test_a_directory_swapped_for_a_link_after_the_listing_is_not_followed(
    acme_storage, globex, source, monkeypatch
):
    theirs = tenant_root(globex.tenant) / "proj" / "sub"
    theirs.mkdir(parents=True)
    (theirs / "a.txt").write_bytes(b"globex secret")
    listed = directories.walk_regular_files

    def then_swap(top_fd):
        found = listed(top_fd)
        (source / "sub").rename(source / "sub.real")
        (source / "sub").symlink_to(theirs)
        return found

    monkeypatch.setattr(directories, "walk_regular_files", then_swap)
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    response = client.post(
        version_url("register", dataset["id"], 1), {"path": str(source)}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "sub" in response.json()["error"]["fields"]["path"][0]
    assert not DatasetFile.objects.exists()
    version = DatasetVersion.objects.get()
    assert version.state == "open" and version.size_bytes == 0
