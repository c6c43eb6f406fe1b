"""An S3 version in a staging plan (apps/jobs/staging.py) and the stager downloading it from
the real S3-compatible server through presigned URLs: no credential in the plan, every file
checked against its sha256, the second job served by the node's cache."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from apps.datasets.models import DatasetFile
from apps.datasets.storage import storage_for
from apps.datasets.uploads import upload_append
from apps.datasets.versions import dataset_create, version_commit, version_create
from apps.jobs.staging import STAGER, _version_entry

NODE = "n1"


@pytest.fixture
def s3_version(acme, settings):
    database = os.environ.get("TORUS_TEST_DATABASE_NAME", "test_torus")
    settings.TORUS_S3_BUCKET = database.replace("_", "-")
    settings.TORUS_DATASET_STORAGE = "s3"
    dataset = dataset_create(actor=None, project=acme.project, name="remote")
    version = version_create(actor=None, dataset=dataset)
    files = {"x/one.bin": os.urandom(300_000), "two.txt": b"two"}
    for path, data in files.items():
        upload_append(
            actor=None, version=version, path=path, offset=0, total=len(data),
            length=len(data), chunks=[data],
        )  # fmt: skip
    version = version_commit(actor=None, version=version)
    assert version.storage_kind == "s3"
    yield version, files
    storage_for("s3").delete(prefix=version.storage_prefix)


def stage(tmp_path, entry: dict, name: str) -> tuple[dict, dict, str]:
    out = tmp_path / name
    out.mkdir()
    plan = {"out_dir": str(out), "cache": True, "limit_bytes": 10**9, "lease_s": 0,
            "cache_dir": str(tmp_path / "cache" / "{node}"), "datasets": [entry]}  # fmt: skip
    text = json.dumps(plan)
    (out / "datasets.json").write_text(text)
    result = subprocess.run(
        [sys.executable, "-I", str(STAGER), str(out / "datasets.json")],
        env={"SLURMD_NODENAME": NODE, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = (out / f"datasets-{NODE}.env").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines)
    report = json.loads((out / f"dataset-cache-{NODE}.json").read_text())
    return report, env, text


def test_an_s3_version_is_staged_through_presigned_urls_and_cached(s3_version, tmp_path):
    version, files = s3_version
    (tmp_path / "cache" / NODE).mkdir(parents=True, mode=0o700)
    rows = list(DatasetFile.objects.filter(version=version).values("path", "size", "sha256"))
    entry = _version_entry(version, {"as": "REMOTE", "ref": str(version)}, rows)
    assert all(f["url"].startswith("http") for f in entry["files"])

    report, env, plan = stage(tmp_path, entry, "attempt-1")
    assert django_settings.TORUS_S3_SECRET_KEY not in plan  # URLs, never the key
    assert (report["misses"], report["bytes_staged"]) == (2, sum(map(len, files.values())))
    staged = env["TORUS_DATASET_REMOTE"]
    for path, data in files.items():
        assert (Path(staged) / path).read_bytes() == data

    report, env, _ = stage(tmp_path, entry, "attempt-2")
    assert (report["hits"], report["misses"]) == (2, 0) and env["TORUS_DATASET_REMOTE"] == staged
