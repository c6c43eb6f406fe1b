"""End to end on the real Slurm cluster: examples/train_ddp.py (2 nodes x 2 ranks) reads a
dataset version and, with `register_model` in its spec, writes its final model; when the job
succeeds the worker registers it as a new version with the job's last metrics, its parameters,
the dataset version its attempt read, and the alias the spec names."""

import hashlib
import json
import time

from apps.jobs.models import Job
from apps.jobs.paths import job_dir
from apps.jobs.states import TERMINAL
from apps.registry.models import ModelVersion, RegisteredModel
from apps.tenancy.models import AuditEvent, Role
from tests.jobs.conftest import output, submit
from tests.jobs.test_datasets_jobs import make_version
from tests.jobs.test_self_healing import final_result, training_spec
from tests.registry.test_api import models_url

STEPS = 25


def wait_for_version(job_id, timeout=300) -> ModelVersion:
    deadline = time.monotonic() + timeout
    while True:
        version = ModelVersion.objects.filter(source_job_id=job_id).first()
        if version is not None and version.state not in ("open", "pending"):
            return version
        job = Job.objects.get(pk=job_id)
        assert job.state in ("SUCCEEDED",) or job.state not in TERMINAL, (
            job.state_reason,
            output(job)[-3000:],
        )
        if time.monotonic() > deadline:  # what the ranks printed says where it stood
            attempts = list(job.attempts.all())
            tail = output(job)[-3000:] if attempts else "no attempt"
            raise AssertionError((job.state, job.state_reason, version, tail))
        time.sleep(0.5)


def test_a_succeeded_training_job_registers_its_model(
    acme, control_loop, shipper_loop, celery_worker
):
    corpus = make_version(acme, "corpus", {"train.bin": b"\x01" * 1024})
    spec = training_spec()
    spec["command"] = ["python", "train_ddp.py", "--steps", str(STEPS)]
    spec["command"] += ["--checkpoint-every", "10", "--lr", "0.01"]
    spec["datasets"] = [{"version": "corpus:1", "as": "TRAIN"}]
    spec["register_model"] = {
        "name": "ddp-mlp",
        "path": "model",
        "alias": "production",
        "framework": "pytorch",
    }
    body = submit(acme.client(Role.MEMBER), acme.project, **spec)
    version = wait_for_version(body["id"])
    job = Job.objects.get(pk=body["id"])
    assert job.state == "SUCCEEDED", job.state_reason
    assert version.state == "ready", version.error
    result = final_result(output(job))
    assert result["final_step"] == STEPS and result["world_size"] == 4

    # the files the job wrote, copied and sealed, with their manifest
    written = job_dir(job) / "model"
    assert {f.path for f in version.files.all()} == {"model.pt", "config.json"}
    for row in version.files.all():
        assert row.sha256 == hashlib.sha256((written / row.path).read_bytes()).hexdigest()
    config = json.loads((written / "config.json").read_text())
    assert config["final_loss"] == result["final_loss"] and config["steps"] == STEPS

    # metrics: the last value of each series; params: the command line; lineage
    assert version.metrics["loss"] == job.metrics.filter(name="loss", step=STEPS).get().value
    assert set(version.metrics) == {"loss", "samples_per_sec"}
    assert version.params == {"steps": str(STEPS), "checkpoint_every": "10", "lr": "0.01"}
    assert version.framework == "pytorch" and version.created_by == acme.users[Role.MEMBER]
    attempt = job.attempts.get()
    assert version.source_attempt == attempt and version.source_job == job
    assert list(version.dataset_versions.all()) == [corpus]
    model = RegisteredModel.objects.get(project=acme.project, name="ddp-mlp")
    assert model.aliases.get(name="production").version == version
    assert AuditEvent.objects.filter(action="model.alias", target_id=str(model.pk)).count() == 1

    client = acme.client(Role.VIEWER)
    lineage = client.get(models_url(model.pk, "versions", 1, "lineage")).json()
    assert lineage["job"]["id"] == str(job.pk) and lineage["attempts"][0]["source"] is True
    assert [d["ref"] for d in lineage["dataset_versions"]] == ["corpus:1"]
    forward = client.get(f"/api/v1/lineage/dataset-versions/{corpus.pk}").json()
    assert [j["id"] for j in forward["jobs"]] == [str(job.pk)]
    assert [v["ref"] for v in forward["model_versions"]] == ["ddp-mlp:1"]
    response = client.get(models_url(model.pk, "versions", 1, "files", "model.pt"))
    assert b"".join(response.streaming_content) == (written / "model.pt").read_bytes()

    # the task runs again (a redelivered message): still one version
    from apps.jobs.tasks import register_model

    register_model.apply(args=[str(attempt.pk)])
    assert ModelVersion.objects.filter(model=model).count() == 1
