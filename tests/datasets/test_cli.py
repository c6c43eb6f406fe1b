"""The SDK and `torus datasets` against the real ASGI server: upload with resume, ls,
versions, diff, downloads; errors are messages, never tracebacks."""

import hashlib
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from apps.datasets.models import DatasetVersion
from apps.datasets.tasks import project_storage_ensure
from apps.tenancy.models import Role
from tests.sdk.cli import run_cli
from torus import Client
from torus.datasets_cli import upload_directory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env(acme, asgi_server):
    project_storage_ensure(str(acme.project.pk))
    return {"TORUS_URL": asgi_server.url, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}


def torus(*args: str, env: dict) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, timeout=120)


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_upload_list_diff_and_download_from_the_cli(env, tmp_path):
    data = _tree(tmp_path / "data", {"a.txt": b"a", "sub/b.bin": os.urandom(300_000)})
    first = torus(
        "datasets", "upload", str(data), "--name", "imgs", "--project", "acme-proj", env=env
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("imgs:1 committed: 2 files")

    (data / "a.txt").write_bytes(b"changed")
    (data / "c.txt").write_bytes(b"new")
    (data / "sub" / "b.bin").unlink()
    second = torus("datasets", "upload", str(data), "--name", "imgs", env=env)
    assert second.returncode == 0 and second.stdout.startswith("imgs:2 committed"), second.stderr

    listing = torus("datasets", "ls", env=env)
    assert listing.stdout.splitlines()[0].split()[:3] == ["NAME", "PROJECT_SLUG", "LATEST_VERSION"]
    assert listing.stdout.splitlines()[1].split()[:3] == ["imgs", "acme-proj", "2"]
    versions = torus("datasets", "versions", "imgs", env=env)
    assert [line.split()[:2] for line in versions.stdout.splitlines()[1:]] == [
        ["1", "committed"],
        ["2", "committed"],
    ]
    diff = torus("datasets", "diff", "imgs:1", "imgs:2", env=env)
    assert diff.stdout.splitlines() == [
        "+ c.txt",
        "- sub/b.bin",
        "~ a.txt",
        "1 added, 1 removed, 1 changed, 0 unchanged",
    ]

    one = torus(
        "datasets", "download", "imgs:1", "--file", "sub/b.bin", "-o", str(tmp_path), env=env
    )
    assert one.returncode == 0, one.stderr
    assert (tmp_path / "b.bin").stat().st_size == 300_000
    whole = torus("datasets", "download", "imgs:2", "-o", str(tmp_path / "out"), env=env)
    assert whole.returncode == 0, whole.stderr
    extracted = tmp_path / "out" / "imgs-v2"
    assert sorted(p.name for p in extracted.rglob("*") if p.is_file()) == ["a.txt", "c.txt"]
    assert (extracted / "a.txt").read_bytes() == b"changed"


def test_the_downloaded_file_is_the_uploaded_one(env, tmp_path):
    payload = os.urandom(2_000_000)
    data = _tree(tmp_path / "d", {"x/blob": payload})
    with Client(url=env["TORUS_URL"], token=env["TORUS_TOKEN"]) as client:
        version = upload_directory(client, data, name="blobs", project="acme-proj")
    assert version["ref"] == "blobs:1" and version["size_bytes"] == len(payload)
    result = torus(
        "datasets", "download", "blobs:1", "--file", "x/blob", "-o", str(tmp_path / "got"), env=env
    )
    assert result.returncode == 0, result.stderr
    assert (
        hashlib.sha256((tmp_path / "got").read_bytes()).digest() == hashlib.sha256(payload).digest()
    )


def test_rerunning_an_interrupted_upload_continues_the_same_version(env, acme, tmp_path):
    payload = os.urandom(3_000_000)
    data = _tree(tmp_path / "d", {"big.bin": payload, "small": b"s"})
    api = httpx.Client(
        base_url=env["TORUS_URL"] + "/api/v1",
        headers={"Authorization": f"Bearer {env['TORUS_TOKEN']}"},
    )
    dataset = api.post("/datasets/", json={"project": str(acme.project.pk), "name": "r"}).json()
    api.post(f"/datasets/{dataset['id']}/versions/", json={})
    # a first run stopped after a million bytes of big.bin
    part = api.put(
        f"/datasets/{dataset['id']}/versions/1/upload/",
        params={"path": "big.bin", "offset": 0, "total": len(payload)},
        content=payload[:1_000_000],
        headers={"Content-Type": "application/octet-stream"},
    )
    assert part.json()["offset"] == 1_000_000

    rerun = torus("datasets", "upload", str(data), "--name", "r", "--json", env=env)
    assert rerun.returncode == 0, rerun.stderr
    version = DatasetVersion.objects.get(dataset_id=dataset["id"])
    assert (version.number, version.state, version.file_count) == (1, "committed", 2)
    big = version.files.get(path="big.bin")
    assert big.sha256 == hashlib.sha256(payload).hexdigest()


def test_errors_are_messages_not_tracebacks(env, tmp_path):
    cases = [
        (("datasets", "versions", "nope"), "no dataset named 'nope'"),
        (("datasets", "download", "nope", "-o", str(tmp_path)), "NAME:NUMBER"),
        (("datasets", "upload", str(tmp_path / "missing"), "--name", "x"), "is not a directory"),
        (("datasets", "upload", str(tmp_path), "--name", "../x", "--project", "acme-proj"), "name"),
    ]
    for args, message in cases:
        result = torus(*args, env=env)
        assert result.returncode == 1, (args, result.stdout)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    viewer = {**env, "TORUS_TOKEN": ""}
    denied = torus("datasets", "ls", env=viewer)
    assert denied.returncode == 1 and "Traceback" not in denied.stderr
