"""The node cache's stager (apps/compute/backends/stager.py) run directly, as a node runs it:
a separate `python3 -I` process per job, against files on disk. Content by hash, LRU eviction
under a limit, leases, two processes racing for one version, and a source that does not match
its manifest."""

import hashlib
import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from apps.jobs.staging import STAGER

NODE = "n1"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def area(tmp_path):
    """Shared storage, a node's cache (the user's subtree, 0700) and attempt directories."""
    shared, cache = tmp_path / "shared", tmp_path / "cache" / NODE / "t" / "p" / "1000"
    shared.mkdir()
    cache.mkdir(parents=True, mode=0o700)
    os.chmod(cache, 0o700)
    return tmp_path


def version(area: Path, files: dict[str, bytes]) -> dict:
    version_id = str(uuid.uuid4())
    root = area / "shared" / version_id
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    entries = [
        {"path": path, "size": len(data), "sha256": _sha(data)}
        for path, data in sorted(files.items())
    ]
    return {"id": version_id, "as": "TRAIN", "ref": f"d:{version_id[:4]}", "storage": "posix",
            "root": str(root), "files": entries}  # fmt: skip


def stage(area: Path, *versions: dict, limit: int = 10**9, lease_s: int = 0, cache=True):
    """One job's staging: a plan in a fresh attempt directory, the stager run as a process."""
    out = area / f"attempt-{uuid.uuid4().hex[:8]}"
    out.mkdir()
    plan = {
        "out_dir": str(out),
        "cache": cache,
        "cache_dir": str(area / "cache" / "{node}" / "t" / "p" / "1000"),
        "limit_bytes": limit,
        "lease_s": lease_s,
        "datasets": [{**v, "as": name} for name, v in zip(["A", "B", "C"], versions, strict=False)],
    }
    (out / "datasets.json").write_text(json.dumps(plan))
    result = subprocess.run(
        [sys.executable, "-I", str(STAGER), str(out / "datasets.json")],
        env={"SLURMD_NODENAME": NODE, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    env = dict(
        line.split("=", 1) for line in (out / f"datasets-{NODE}.env").read_text().splitlines()
    )
    return json.loads((out / f"dataset-cache-{NODE}.json").read_text()), env


def cached_versions(area: Path) -> set[str]:
    return {p.name for p in (area / "cache" / NODE / "t" / "p" / "1000" / "versions").iterdir()}


def test_a_version_is_staged_once_then_read_from_the_cache_read_only(area):
    v = version(area, {"a.bin": b"a" * 1000, "sub/b.bin": b"b" * 500})
    first, env = stage(area, v)
    assert (first["misses"], first["hits"], first["bytes_staged"]) == (2, 0, 1500)
    path = Path(env["TORUS_DATASET_A"])
    assert env["TORUS_DATASETS"] == "A"
    assert (path / "sub" / "b.bin").read_bytes() == b"b" * 500
    assert path.is_relative_to(area / "cache" / NODE)
    # read-only: no write bits on the files or directories of the view
    assert all(os.stat(p).st_mode & 0o222 == 0 for p in [path, path / "sub", *path.rglob("*")])
    second, env2 = stage(area, v)
    assert (second["misses"], second["hits"], second["bytes_staged"]) == (0, 2, 0)
    assert second["bytes_hit"] == 1500 and env2["TORUS_DATASET_A"] == str(path)
    assert second["versions"][0]["mode"] == "cached"


def test_files_already_cached_for_another_version_are_linked_not_copied(area):
    v1 = version(area, {"same.bin": b"s" * 800, "old.bin": b"o" * 100})
    v2 = version(area, {"same.bin": b"s" * 800, "new.bin": b"n" * 200})
    stage(area, v1)
    report, env = stage(area, v2)
    assert (report["hits"], report["misses"], report["bytes_staged"]) == (1, 1, 200)
    view = Path(env["TORUS_DATASET_A"])
    assert os.stat(view / "same.bin").st_nlink == 3  # blob + both versions


def test_least_recently_used_versions_are_evicted_under_the_limit(area):
    v1, v2, v3, v4 = (version(area, {"f": bytes([i]) * 1000}) for i in range(4))
    for v in (v1, v2):
        stage(area, v, limit=2500)
    report, _ = stage(area, v1, limit=2500)  # v1 used again: v2 is now the oldest
    assert report["hits"] == 1
    report, _ = stage(area, v3, limit=2500)
    assert cached_versions(area) == {v1["id"], v3["id"]}
    assert report["evicted_bytes"] == 1000
    stage(area, v4, limit=2500)
    assert cached_versions(area) == {v3["id"], v4["id"]}
    blobs = list((area / "cache" / NODE / "t" / "p" / "1000" / "blobs").rglob("*"))
    assert sum(p.stat().st_size for p in blobs if p.is_file()) == 2000


def test_a_leased_version_is_not_evicted_and_a_full_cache_reads_in_place(area):
    v1, v2 = version(area, {"f": b"1" * 1000}), version(area, {"f": b"2" * 1000})
    stage(area, v1, limit=1500, lease_s=3600)  # a job still running reads v1
    report, env = stage(area, v2, limit=1500)
    assert cached_versions(area) == {v1["id"]}
    assert report["versions"][0]["mode"] == "direct (cache full)"
    assert env["TORUS_DATASET_A"] == v2["root"]


def test_two_jobs_racing_for_one_version_stage_it_once(area):
    v = version(area, {f"part-{i}": os.urandom(256 * 1024) for i in range(24)})
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: stage(area, v), range(2)))
    reports = [r for r, _ in results]
    assert sorted(r["misses"] for r in reports) == [0, 24]
    assert sorted(r["hits"] for r in reports) == [0, 24]
    assert sum(r["bytes_staged"] for r in reports) == 24 * 256 * 1024
    assert {env["TORUS_DATASET_A"] for _, env in results} == {
        str(area / "cache" / NODE / "t" / "p" / "1000" / "versions" / v["id"])
    }
    blobs = [p for p in (area / "cache" / NODE / "t" / "p" / "1000" / "blobs").rglob("*")]
    assert len([p for p in blobs if p.is_file()]) == 24


def test_a_file_that_does_not_match_its_manifest_is_refused_and_nothing_is_cached(area):
    v = version(area, {"good": b"g" * 10, "bad": b"b" * 10})
    Path(v["root"], "bad").write_bytes(b"x" * 10)  # changed on shared storage
    out = area / "attempt-bad"
    out.mkdir()
    plan = {"out_dir": str(out), "cache": True, "limit_bytes": 10**6, "lease_s": 0,
            "cache_dir": str(area / "cache" / "{node}" / "t" / "p" / "1000"),
            "datasets": [v]}  # fmt: skip
    (out / "plan.json").write_text(json.dumps(plan))
    result = subprocess.run(
        [sys.executable, "-I", str(STAGER), str(out / "plan.json")],
        env={"SLURMD_NODENAME": NODE},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1 and "differs from the manifest" in result.stderr
    assert cached_versions(area) == set()
    assert not (out / f"datasets-{NODE}.env").exists()


def test_cache_off_reads_shared_storage_in_place(area):
    v = version(area, {"f": b"z" * 10})
    report, env = stage(area, v, cache=False)
    assert env["TORUS_DATASET_A"] == v["root"]
    assert report["cache"] is False and report["misses"] == 0
    assert not (area / "cache" / NODE / "t" / "p" / "1000" / "versions").exists()


def test_a_cache_directory_open_to_others_is_not_used(area):
    os.chmod(area / "cache" / NODE / "t" / "p" / "1000", 0o755)
    v = version(area, {"f": b"z" * 10})
    report, env = stage(area, v)
    assert report["cache"] is False and "open to others" in report["note"]
    assert env["TORUS_DATASET_A"] == v["root"]
