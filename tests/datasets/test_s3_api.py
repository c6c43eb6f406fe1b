"""A dataset version of storage kind "s3" through the API, on the real S3 gateway: chunked
and resumed uploads, commit (sealed in S3), verify, archive, and downloads that redirect to a
presigned URL fetched with plain httpx."""

import io
import os
import subprocess
import tarfile

import httpx
import pytest
from django.test import Client
from django.urls import reverse

from apps.datasets.models import DatasetVersion
from apps.datasets.storage.base import Sealed
from apps.datasets.storage.s3 import S3Storage
from apps.tenancy.models import Role
from tests.datasets.conftest import (
    commit,
    create_dataset,
    member,
    put_chunk,
    sha,
    upload,
    version_url,
)
from tests.datasets.test_s3_storage import PART, s3_settings  # noqa: F401 (fixture)
from tests.sdk.cli import cli_env, run_cli


@pytest.fixture
def acme_s3(acme, s3_settings):  # noqa: F811
    """acme, with every key under its tree removed from the tests' bucket afterwards."""
    yield acme
    S3Storage().delete(prefix=f"{acme.tenant.slug}/{acme.project.slug}/datasets")


def open_s3_version(client, dataset_id) -> dict:
    response = client.post(
        reverse("dataset-version-list", kwargs={"dataset_pk": dataset_id}),
        {"storage_kind": "s3"},
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_a_version_in_s3_is_uploaded_committed_verified_and_downloaded(acme_s3):
    client = member(acme_s3)
    dataset = create_dataset(client, acme_s3.project)
    version = open_s3_version(client, dataset["id"])
    assert version["storage_kind"] == "s3"
    big, small = os.urandom(2 * PART + 4097), b"label,1\n"
    done = upload(client, dataset["id"], 1, "train/big.bin", big, chunk=1 << 20)
    assert done["file"] == {"path": "train/big.bin", "size": len(big), "sha256": sha(big)}
    upload(client, dataset["id"], 1, "labels.csv", small)

    storage = S3Storage()
    row = DatasetVersion.objects.get(pk=version["id"])
    keys = dict(storage.list(prefix=row.storage_prefix))
    assert keys == {row.file_key("labels.csv"): len(small), row.file_key("train/big.bin"): len(big)}
    assert storage.local_path(key=row.file_key("labels.csv")) is None

    response = commit(client, dataset["id"], 1)
    assert response.status_code == 200, response.content
    assert response.json()["file_count"] == 2
    with pytest.raises(Sealed):
        storage.begin_upload(key=row.file_key("late.bin"))
    assert client.post(version_url("verify", dataset["id"], 1)).json()["ok"] is True

    # a file: the API redirects to a presigned URL on the S3 endpoint
    redirect = client.get(version_url("download", dataset["id"], 1) + "?path=train/big.bin")
    assert redirect.status_code == 302
    fetched = httpx.get(redirect["Location"])
    assert fetched.status_code == 200 and fetched.content == big

    # the version as a tar, streamed from S3 through the API
    archive = client.get(version_url("archive", dataset["id"], 1))
    assert archive.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(b"".join(archive.streaming_content))) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert sorted(members.values(), key=len) == [small, big]


def test_an_s3_upload_resumes_after_a_dropped_request(acme_s3):
    client = member(acme_s3)
    dataset = create_dataset(client, acme_s3.project, name="resumed")
    open_s3_version(client, dataset["id"])
    data = os.urandom(PART + 300_000)
    first = put_chunk(client, dataset["id"], 1, "x.bin", data[:PART], offset=0, total=len(data))
    assert first.status_code == 200 and first.json()["offset"] == PART

    # the client lost the answer and sends from 0 again: told where to continue
    again = put_chunk(client, dataset["id"], 1, "x.bin", data[:100], offset=0, total=len(data))
    assert again.status_code == 409
    state = client.get(version_url("upload", dataset["id"], 1) + "?path=x.bin").json()
    assert state["offset"] == PART and state["complete"] is False
    rest = put_chunk(
        client, dataset["id"], 1, "x.bin", data[PART:], offset=PART, total=len(data)
    ).json()
    assert rest["complete"] is True and rest["file"]["sha256"] == sha(data)


def test_an_unknown_storage_kind_is_a_400_naming_the_field(acme_s3):
    client = member(acme_s3)
    dataset = create_dataset(client, acme_s3.project, name="kinds")
    response = client.post(
        reverse("dataset-version-list", kwargs={"dataset_pk": dataset["id"]}),
        {"storage_kind": "ftp"},
        format="json",
    )
    assert response.status_code == 400
    assert "storage_kind" in response.json()["error"]["fields"]
    assert not DatasetVersion.objects.filter(dataset_id=dataset["id"]).exists()


@pytest.mark.django_db
def test_readyz_names_s3_when_it_does_not_answer(settings):
    assert Client().get("/readyz").json()["checks"]["s3"]["status"] == "ok"
    settings.TORUS_S3_ENDPOINT_URL = "http://127.0.0.1:9"
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["s3"]["status"] == "error"
    assert "S3 unreachable" in response.json()["checks"]["s3"]["error"]


@pytest.mark.django_db(transaction=True)
def test_the_cli_uploads_to_s3_and_downloads_a_file_and_the_version(acme_s3, asgi_server, tmp_path):
    env = cli_env(url=asgi_server.url, token=acme_s3.tokens[Role.MEMBER])

    def torus(*args: str) -> subprocess.CompletedProcess:
        return run_cli(*args, env=env, timeout=300)

    data = tmp_path / "data"
    (data / "x").mkdir(parents=True)
    payload = os.urandom(PART + 1000)
    (data / "x" / "blob").write_bytes(payload)
    (data / "readme").write_bytes(b"hello")
    upload = torus(
        "datasets", "upload", str(data), "--name", "remote", "--project", acme_s3.project.slug,
        "--storage", "s3",
    )  # fmt: skip
    assert upload.returncode == 0, upload.stderr
    assert DatasetVersion.objects.get(dataset__name="remote", number=1).storage_kind == "s3"

    one = torus("datasets", "download", "remote:1", "--file", "x/blob", "-o", str(tmp_path / "b"))
    assert one.returncode == 0, one.stderr
    assert (tmp_path / "b").read_bytes() == payload
    whole = torus("datasets", "download", "remote:1", "-o", str(tmp_path / "out"))
    assert whole.returncode == 0, whole.stderr
    assert (tmp_path / "out" / "remote-v1" / "x" / "blob").read_bytes() == payload
    assert (tmp_path / "out" / "remote-v1" / "readme").read_bytes() == b"hello"

    # bytes changed in the store behind the platform's back: the CLI refuses them
    row = DatasetVersion.objects.get(dataset__name="remote", number=1)
    storage = S3Storage()
    storage._s3().put_object(Bucket=storage.bucket, Key=row.file_key("readme"), Body=b"HELLO")
    bad = torus("datasets", "download", "remote:1", "--file", "readme", "-o", str(tmp_path / "r"))
    assert bad.returncode != 0 and "sha256" in bad.stderr
    assert not (tmp_path / "r").exists()
