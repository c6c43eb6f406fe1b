"""Datasets through the API: create, fill, commit, immutability, compare, manifest, verify,
downloads, and who may do what."""

import io
import os
import stat
import tarfile
from pathlib import Path

from django.urls import reverse

from apps.datasets.models import DatasetVersion
from apps.identity.storage import project_root
from apps.tenancy.models import Role
from tests.datasets.conftest import (
    commit,
    create_dataset,
    member,
    open_version,
    put_chunk,
    sha,
    upload,
    version_url,
)


def test_a_version_is_filled_committed_and_then_immutable(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    version = open_version(client, dataset["id"])
    assert (version["number"], version["state"]) == (1, "open")
    a, b = os.urandom(200_000), b"hello\n"
    done = upload(client, dataset["id"], 1, "train/a.bin", a)
    assert done["file"] == {"path": "train/a.bin", "size": len(a), "sha256": sha(a)}
    upload(client, dataset["id"], 1, "b.txt", b)

    response = commit(client, dataset["id"], 1)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "committed" and body["file_count"] == 2
    assert body["size_bytes"] == len(a) + len(b)
    assert len(body["manifest_sha256"]) == 64

    # no more writes: the API refuses, storage is sealed
    refused = put_chunk(client, dataset["id"], 1, "c.txt", b"x", offset=0, total=1)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "version_committed"
    assert commit(client, dataset["id"], 1).json()["error"]["code"] == "version_committed"
    gone = client.delete(version_url("detail", dataset["id"], 1))
    assert gone.status_code == 409
    version_dir = project_root(acme_storage.project) / "datasets" / dataset["id"] / "v1"
    assert not os.stat(version_dir).st_mode & 0o222
    assert not os.stat(version_dir / "train" / "a.bin").st_mode & 0o222

    manifest = client.get(version_url("files", dataset["id"], 1)).json()["results"]
    assert [f["path"] for f in manifest] == ["b.txt", "train/a.bin"]
    listing = client.get(reverse("dataset-version-list", kwargs={"dataset_pk": dataset["id"]}))
    assert [v["ref"] for v in listing.json()["results"]] == ["images:1"]
    detail = client.get(reverse("dataset-detail", args=[dataset["id"]])).json()
    assert detail["latest_version"] == 1


def test_versions_compare_by_content(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    for path, data in {"same": b"1", "changed": b"old", "removed": b"r"}.items():
        upload(client, dataset["id"], 1, path, data)
    assert commit(client, dataset["id"], 1).status_code == 200
    open_version(client, dataset["id"])
    for path, data in {"same": b"1", "changed": b"new", "added": b"a"}.items():
        upload(client, dataset["id"], 2, path, data)
    assert commit(client, dataset["id"], 2).status_code == 200
    response = client.get(reverse("dataset-compare", args=[dataset["id"]]), {"a": 1, "b": 2})
    assert response.json() == {
        "a": 1,
        "b": 2,
        "added": ["added"],
        "removed": ["removed"],
        "changed": ["changed"],
        "unchanged": 1,
    }


def test_verify_finds_changed_missing_and_unexpected_files(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    for path in ("keep", "change", "lose"):
        upload(client, dataset["id"], 1, path, path.encode() * 10)
    commit(client, dataset["id"], 1)
    ok = client.post(version_url("verify", dataset["id"], 1)).json()
    assert ok["ok"] is True and ok["checked"] == 3

    root = project_root(acme_storage.project) / "datasets" / dataset["id"] / "v1"
    os.chmod(root, 0o2750)
    (root / "change").chmod(0o640)
    (root / "change").write_bytes(b"CHANGE" * 5)  # same size, other bytes
    (root / "lose").unlink()
    (root / "extra").write_bytes(b"x")
    bad = client.post(version_url("verify", dataset["id"], 1)).json()
    assert bad == {
        "ok": False,
        "checked": 3,
        "missing": ["lose"],
        "changed": ["change"],
        "unexpected": ["extra"],
    }


def test_download_a_file_with_ranges_and_the_version_as_a_tar(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    data = os.urandom(3_000_000)
    upload(client, dataset["id"], 1, "dir/big.bin", data, chunk=1_000_000)
    upload(client, dataset["id"], 1, "small.txt", b"small")
    commit(client, dataset["id"], 1)
    viewer = acme_storage.client(Role.VIEWER)

    url = version_url("download", dataset["id"], 1)
    whole = viewer.get(url, {"path": "dir/big.bin"})
    assert whole.status_code == 200 and whole["ETag"] == f'"{sha(data)}"'
    assert b"".join(whole.streaming_content) == data
    part = viewer.get(url, {"path": "dir/big.bin"}, HTTP_RANGE="bytes=10-19")
    assert part.status_code == 206 and part["Content-Range"] == f"bytes 10-19/{len(data)}"
    assert b"".join(part.streaming_content) == data[10:20]
    tail = viewer.get(url, {"path": "dir/big.bin"}, HTTP_RANGE="bytes=-5")
    assert b"".join(tail.streaming_content) == data[-5:]
    assert viewer.get(url, {"path": "dir/big.bin"}, HTTP_RANGE="bytes=9999999-").status_code == 416
    assert viewer.get(url, {"path": "nope"}).status_code == 404

    archive = viewer.get(version_url("archive", dataset["id"], 1))
    body = b"".join(archive.streaming_content)
    assert int(archive["Content-Length"]) == len(body)
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["images-v1/dir/big.bin", "images-v1/small.txt"]
        assert tar.extractfile("images-v1/dir/big.bin").read() == data


def test_storage_is_owned_by_the_platform_with_the_projects_group(acme_storage):
    import grp
    import pwd

    from apps.identity.models import PosixGroup

    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    upload(client, dataset["id"], 1, "f", b"data")
    area = project_root(acme_storage.project) / "datasets"
    group = PosixGroup.objects.get(project=acme_storage.project)
    for path, mode in (
        (area, 0o2750),
        (area.parent / "models", 0o2750),
        (area / dataset["id"], 0o2750),
        (area / dataset["id"] / "v1", 0o2750),
        (area / dataset["id"] / "v1" / "f", 0o640),
    ):
        info = os.stat(path)
        assert pwd.getpwuid(info.st_uid).pw_name == "torus", path
        assert info.st_gid == group.gid, (path, grp.getgrgid(info.st_gid).gr_name)
        assert stat.S_IMODE(info.st_mode) == mode, (path, oct(info.st_mode))


def test_roles_viewers_read_only_members_of_the_project_write(acme_storage):
    dataset = create_dataset(member(acme_storage), acme_storage.project)
    viewer = acme_storage.client(Role.VIEWER)
    refused = viewer.post(
        reverse("dataset-list"), {"project": str(acme_storage.project.pk), "name": "x"}
    )
    assert refused.status_code == 403
    opened = viewer.post(reverse("dataset-version-list", kwargs={"dataset_pk": dataset["id"]}))
    assert opened.status_code == 403
    assert viewer.get(reverse("dataset-detail", args=[dataset["id"]])).status_code == 200
    # a member outside the project cannot write to it
    from tests.factories import ProjectFactory

    other = ProjectFactory(tenant=acme_storage.tenant, slug="other")
    response = member(acme_storage).post(
        reverse("dataset-list"), {"project": str(other.pk), "name": "x"}, format="json"
    )
    assert response.status_code == 403


def test_another_tenants_dataset_is_a_404(acme_storage, globex):
    dataset = create_dataset(member(acme_storage), acme_storage.project)
    outsider = globex.client(Role.OWNER)
    assert outsider.get(reverse("dataset-detail", args=[dataset["id"]])).status_code == 404
    versions = reverse("dataset-version-list", kwargs={"dataset_pk": dataset["id"]})
    assert outsider.get(versions).status_code == 404
    assert outsider.post(versions, {}, format="json").status_code == 404
    assert outsider.get(reverse("dataset-list")).json()["results"] == []


def test_names_are_validated_and_unique_per_project(acme_storage):
    client = member(acme_storage)
    for bad in ("../x", "a/b", "", "-lead", "x" * 65, "a b"):
        response = client.post(
            reverse("dataset-list"),
            {"project": str(acme_storage.project.pk), "name": bad},
            format="json",
        )
        assert response.status_code == 400, bad
        assert "name" in response.json()["error"]["fields"]
    create_dataset(client, acme_storage.project, name="ok")
    again = client.post(
        reverse("dataset-list"), {"project": str(acme_storage.project.pk), "name": "ok"}
    )
    assert again.status_code == 409 and again.json()["error"]["code"] == "dataset_exists"


def test_discarding_an_open_version_removes_its_files(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    upload(client, dataset["id"], 1, "f", b"data")
    put_chunk(client, dataset["id"], 1, "partial", b"12", offset=0, total=10)
    assert client.delete(version_url("detail", dataset["id"], 1)).status_code == 204
    assert not DatasetVersion.objects.filter(dataset_id=dataset["id"]).exists()
    area = project_root(acme_storage.project) / "datasets"
    assert not (area / dataset["id"] / "v1").exists()
    assert list(Path(area / ".uploads").iterdir()) == []


def test_a_dataset_with_versions_is_archived_not_deleted(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    upload(client, dataset["id"], 1, "f", b"data")
    assert commit(client, dataset["id"], 1).status_code == 200
    url = reverse("dataset-detail", args=[dataset["id"]])
    assert client.delete(url).status_code == 403  # members do not delete
    admin = acme_storage.client(Role.ADMIN)
    assert admin.delete(url).status_code == 409  # it has a version: archived, never deleted
    response = admin.post(f"{url}archive/", {"confirm": dataset["name"]}, format="json")
    assert response.status_code == 200, response.content
    area = project_root(acme_storage.project) / "datasets"
    assert (area / dataset["id"]).exists()  # its files stay until an operator purges it
    assert DatasetVersion.objects.filter(dataset_id=dataset["id"]).exists()
