"""Lineage both ways (model version -> job, attempts, logs, metrics, datasets; dataset version
-> jobs and model versions), and registration from a directory of the project's tree, copied
by the worker without following a symlink or a hard link out of it."""

import os
import time

import pytest

from apps.datasets.models import Dataset, DatasetVersion
from apps.identity.storage import project_root
from apps.jobs.attempts import attempt_open
from apps.registry.models import ModelVersion
from apps.tenancy.models import Role
from tests.factories import make_job
from tests.registry.test_api import create_model, models_url, upload_version


def dataset_version(world, name="imagenet", number=1) -> DatasetVersion:
    dataset, _ = Dataset.objects.get_or_create(
        tenant=world.tenant, project=world.project, name=name
    )
    return DatasetVersion.objects.create(dataset=dataset, number=number, state="committed")


@pytest.mark.django_db
def test_lineage_from_a_version_and_from_a_dataset_version(acme, globex, models_area):
    train, extra = dataset_version(acme), dataset_version(acme, name="labels")
    unused = dataset_version(acme, name="unused")
    job = make_job(
        project=acme.project, user=acme.users[Role.MEMBER], state="SUCCEEDED", gpus_per_node=0
    )
    first = attempt_open(job=job)
    second = attempt_open(job=job)
    second.dataset_versions.add(train)
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(
        client,
        model["id"],
        {"w.bin": b"w"},
        source_attempt=str(second.pk),
        dataset_versions=["labels:1"],
        metrics={"acc": 0.8},
    )
    upload_version(client, model["id"], {"w.bin": b"v2"})  # by hand: no lineage

    data = client.get(models_url(model["id"], "versions", 1, "lineage")).json()
    assert data["version"]["ref"] == "resnet:1"
    assert data["job"]["id"] == str(job.pk) and data["job"]["logs"] == f"/api/v1/jobs/{job.pk}/logs"
    assert [(a["number"], a["source"]) for a in data["attempts"]] == [(1, False), (2, True)]
    assert data["attempts"][1]["dataset_versions"] == [str(train.pk)]
    assert data["attempts"][1]["logs"].endswith("logs?attempt=2")
    assert data["metrics"] == {"acc": 0.8}
    assert sorted(d["ref"] for d in data["dataset_versions"]) == ["imagenet:1", "labels:1"]
    assert client.get(models_url(model["id"], "versions", 2, "lineage")).json()["job"] is None

    forward = client.get(f"/api/v1/lineage/dataset-versions/{train.pk}").json()
    assert [j["id"] for j in forward["jobs"]] == [str(job.pk)]
    assert [a["number"] for a in forward["jobs"][0]["attempts"]] == [2]
    assert [v["ref"] for v in forward["model_versions"]] == ["resnet:1"]
    forward = client.get(f"/api/v1/lineage/dataset-versions/{extra.pk}").json()
    assert forward["jobs"] == [] and [v["ref"] for v in forward["model_versions"]] == ["resnet:1"]
    forward = client.get(f"/api/v1/lineage/dataset-versions/{unused.pk}").json()
    assert forward["jobs"] == [] and forward["model_versions"] == []
    assert first.pk  # the first attempt read nothing and is listed without datasets

    # another tenant sees neither end
    stranger = globex.client(Role.OWNER)
    assert stranger.get(f"/api/v1/lineage/dataset-versions/{train.pk}").status_code == 404
    assert stranger.get(models_url(model["id"], "versions", 1, "lineage")).status_code == 404
    # nor can a version name another tenant's attempt or dataset version as its source
    theirs = dataset_version(globex, name="theirs")
    response = client.post(
        models_url(model["id"], "versions"), {"dataset_versions": [str(theirs.pk)]}, format="json"
    )
    assert response.status_code == 400
    their_job = make_job(project=globex.project, user=globex.users[Role.OWNER], gpus_per_node=0)
    response = client.post(
        models_url(model["id"], "versions"),
        {"source_attempt": str(attempt_open(job=their_job).pk)},
        format="json",
    )
    assert response.status_code == 400
    assert ModelVersion.objects.count() == 2


def wait_state(version_id, timeout=60) -> ModelVersion:
    deadline = time.monotonic() + timeout
    while True:
        version = ModelVersion.objects.get(pk=version_id)
        if version.state != "pending":
            return version
        assert time.monotonic() < deadline, "the worker never copied the version"
        time.sleep(0.1)


@pytest.fixture
def output_dir(acme, models_area):
    """A job's output directory in the project's tree, as a job leaves it."""
    path = project_root(acme.project) / "jobs" / "j1" / "model"
    (path / "sub").mkdir(parents=True)
    (path / "model.pt").write_bytes(b"weights" * 1000)
    (path / "sub" / "config.json").write_text("{}")
    return path


def register_path(acme, path):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    response = client.post(models_url(model["id"], "versions"), {"path": str(path)}, format="json")
    return model, response


def test_register_a_directory_of_the_project_tree(acme, output_dir, celery_worker):
    model, response = register_path(acme, output_dir)
    assert response.status_code == 201, response.content
    assert response.json()["state"] == "pending"
    version = wait_state(response.json()["id"])
    assert version.state == "ready", version.error
    files = {f.path: f.size for f in version.files.all()}
    assert files == {"model.pt": 7000, "sub/config.json": 2}
    assert (
        models_area_of(acme) / model["id"] / "v1" / "model.pt"
    ).read_bytes() == b"weights" * 1000


def models_area_of(world):
    return project_root(world.project) / "models"


def test_a_symlink_out_of_the_tree_is_not_followed(acme, output_dir, celery_worker, tmp_path):
    canary = tmp_path / "canary"
    canary.write_text("platform secret")
    os.symlink(canary, output_dir / "leak.txt")
    _, response = register_path(acme, output_dir)
    version = wait_state(response.json()["id"])
    assert version.state == "failed" and "leak.txt" in version.error
    assert not version.files.exists()
    stored = models_area_of(acme)
    assert not any(b"platform secret" in p.read_bytes() for p in stored.rglob("*") if p.is_file())


def test_a_hard_link_is_refused(acme, output_dir, celery_worker, settings):
    outside = project_root(acme.project).parent / "outside.bin"
    outside.write_text("not the job's")
    os.link(outside, output_dir / "linked.bin")
    _, response = register_path(acme, output_dir)
    version = wait_state(response.json()["id"])
    assert version.state == "failed" and "hard links" in version.error


@pytest.mark.django_db
def test_paths_outside_the_project_are_refused(acme, globex, output_dir, globex_area):
    link = project_root(acme.project) / "jobs" / "via-link"
    os.symlink(project_root(globex.project), link)
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    for path in (
        "/etc",
        str(project_root(globex.project)),
        str(link),
        f"{output_dir}/../../../../..",
        "model",
    ):
        response = client.post(models_url(model["id"], "versions"), {"path": path}, format="json")
        assert response.status_code == 400, (path, response.content)
        assert "path" in response.json()["error"]["fields"]
    assert not ModelVersion.objects.exists()
