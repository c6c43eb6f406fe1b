"""The background builds `make up` leaves running (scripts/builds' status files), as /readyz, the
clusters API and `torus clusters` report them: waiting, building (step n of m) or failed."""

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from apps.compute.builds import pending_builds
from apps.compute.models import Backend, Cluster
from apps.tenancy.models import Role
from tests.factories import UserFactory
from tests.sdk.cli import cli_env, run_cli


def iso(minutes_ago: float) -> str:
    moment = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def write(directory, name: str, state: str, step: int, steps: int, step_name: str, **more):
    """A status file as scripts/builds writes it (one JSON object)."""
    row = {
        "name": name,
        "state": state,
        "step": step,
        "steps": steps,
        "step_name": step_name,
        "started": iso(4.5) if state != "waiting" else None,
        "finished": iso(0) if state in ("done", "failed") else None,
        "log": "/var/torus/log/builds.log",
        "cluster": None,
        "pid": os.getpid(),
        **more,
    }
    (directory / f"{name}.json").write_text(json.dumps(row))


@pytest.fixture
def builds_dir(settings, tmp_path):
    settings.TORUS_BUILDS_DIR = tmp_path
    return tmp_path


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_builds_not_done_by_name_a_dead_builders_build_failed(builds_dir, dead_pid):
    write(builds_dir, "kubernetes", "building", 1, 3, "build binaries", cluster="local-k8s")
    write(builds_dir, "engine", "waiting", 0, 2, "waiting")
    write(builds_dir, "done-one", "done", 2, 2, "install it")
    write(builds_dir, "broken", "failed", 1, 2, "build llama-server")
    write(builds_dir, "orphan", "building", 2, 3, "start", pid=dead_pid)
    (builds_dir / "half.json").write_text('{"name": "half", "st')  # unreadable: left out

    builds = {b.name: b for b in pending_builds()}
    assert list(builds) == ["broken", "engine", "kubernetes", "orphan"]
    kubernetes = builds["kubernetes"]
    assert (kubernetes.state, kubernetes.step, kubernetes.steps) == ("building", 1, 3)
    assert kubernetes.step_name == "build binaries" and kubernetes.cluster == "local-k8s"
    assert kubernetes.started < datetime.now(UTC) and kubernetes.finished is None
    assert (builds["engine"].state, builds["engine"].step, builds["engine"].started) == (
        "waiting",
        0,
        None,
    )
    assert builds["broken"].state == "failed" and builds["broken"].error == ""
    assert builds["orphan"].state == "failed"
    assert f"pid {dead_pid}" in builds["orphan"].error
    assert "log" not in kubernetes.public()
    assert pending_builds(builds_dir=builds_dir / "none") == []


@pytest.mark.django_db(transaction=True)
def test_readyz_lists_the_builds_and_stays_ready_while_one_runs(builds_dir, celery_worker):
    body = Client().get("/readyz").json()
    assert body["builds"] == []
    write(builds_dir, "kubernetes", "building", 1, 3, "build binaries", cluster="local-k8s")
    write(builds_dir, "engine", "failed", 1, 2, "build llama-server")
    write(builds_dir, "old", "done", 2, 2, "install it")
    response = Client().get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert [
        (b["name"], b["state"], b["step"], b["steps"], b["step_name"]) for b in body["builds"]
    ] == [
        ("engine", "failed", 1, 2, "build llama-server"),
        ("kubernetes", "building", 1, 3, "build binaries"),
    ]
    assert body["builds"][1]["started"].endswith("Z") and body["builds"][1]["finished"] is None
    assert "log" not in body["builds"][0]  # no paths to anonymous readers


@pytest.mark.django_db(transaction=True)
def test_a_cluster_still_being_built_does_not_fail_readyz_until_its_build_fails(
    builds_dir, celery_worker
):
    Cluster.objects.create(
        name="local-k8s",
        backend=Backend.SLURM,
        config={"restd_url": "http://127.0.0.1:9", "slurm_conf": "/nonexistent", "user": "x"},
    )
    write(builds_dir, "kubernetes", "building", 2, 3, "start", cluster="local-k8s")
    response = Client().get("/readyz")
    assert response.status_code == 200, response.json()
    assert response.json()["checks"]["clusters"]["status"] == "ok"

    write(builds_dir, "kubernetes", "failed", 2, 3, "start", cluster="local-k8s")
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["clusters"]["error"].startswith("RuntimeError: local-k8s: ")
    assert response.json()["builds"][0]["state"] == "failed"


def test_the_s3_gateway_still_being_built_is_coming_until_its_build_fails(
    builds_dir, settings, celery_worker
):
    """`make up` starts the portal with the gateway's keys while the gateway is built: /readyz
    stays ready, and a storage call says why S3 does not answer (nothing listens on port 9)."""
    from apps.datasets.storage import storage_for
    from apps.datasets.storage.base import StorageError

    settings.TORUS_S3_ENDPOINT_URL = "http://127.0.0.1:9"
    write(builds_dir, "s3", "building", 1, 2, "build the gateway")
    response = Client().get("/readyz")
    assert response.status_code == 200, response.json()
    assert response.json()["checks"]["s3"]["status"] == "ok"
    assert [b["name"] for b in response.json()["builds"]] == ["s3"]
    with pytest.raises(StorageError, match=r"still being built: step 1 of 2, build the gateway"):
        storage_for("s3").ping()

    write(builds_dir, "s3", "failed", 1, 2, "build the gateway")
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert "S3 unreachable" in response.json()["checks"]["s3"]["error"]
    with pytest.raises(StorageError) as raised:
        storage_for("s3").ping()
    assert "still being built" not in str(raised.value)


def test_the_api_lists_the_builds_not_done_the_log_for_staff_only(builds_dir, acme):
    url = reverse("cluster-builds")
    assert url == "/api/v1/clusters/builds/"
    assert acme.client(Role.VIEWER).get(url).json() == {"results": []}
    write(builds_dir, "kubernetes", "building", 1, 3, "build binaries", cluster="local-k8s")
    write(builds_dir, "engine", "done", 2, 2, "install it")

    response = acme.client(Role.VIEWER).get(url)
    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert {k: row[k] for k in ("name", "state", "step", "steps", "step_name", "cluster")} == {
        "name": "kubernetes",
        "state": "building",
        "step": 1,
        "steps": 3,
        "step_name": "build binaries",
        "cluster": "local-k8s",
    }
    assert "log" not in row
    staff = APIClient()
    staff.force_authenticate(UserFactory(username="operator", is_staff=True))
    assert staff.get(url).json()["results"][0]["log"] == "/var/torus/log/builds.log"
    assert APIClient().get(url).status_code == 401
    # the clusters list keeps its shape
    assert set(acme.client(Role.VIEWER).get(reverse("cluster-list")).json()) == {
        "next",
        "previous",
        "results",
    }


@pytest.mark.django_db(transaction=True)
def test_torus_clusters_prints_a_line_per_build_not_done(builds_dir, live_server, acme):
    env = cli_env(url=live_server.url, token=acme.tokens[Role.VIEWER])
    quiet = run_cli("clusters", env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert "step" not in quiet.stdout

    write(builds_dir, "kubernetes", "building", 1, 3, "build binaries", cluster="local-k8s")
    write(builds_dir, "engine", "waiting", 0, 2, "waiting")
    write(builds_dir, "broken", "failed", 2, 2, "install it")
    shown = run_cli("clusters", env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("NAME")
    assert lines[-3:] == [
        "broken: FAILED at step 2 of 2 (install it)",
        "engine: waiting for the builds before it",
        "kubernetes: building, step 1 of 3 (build binaries), 4 min so far",
    ]
    as_json = run_cli("--json", "clusters", env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == []  # the JSON stays the clusters' list
