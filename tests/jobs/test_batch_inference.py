"""Batch inference (apps/jobs/inference.py): a model version and a dataset version in,
predictions out as a new dataset version with lineage both ways.

End to end on the real Slurm cluster: examples/train_ddp.py registers its model, an input
dataset is uploaded through the API, examples/batch_infer.py runs as an inference job that
reads both read-only, and the worker turns its output into a committed dataset version."""

import csv
import io
import json
import random
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from django.urls import reverse

from apps.datasets.models import Dataset, DatasetVersion
from apps.datasets.tasks import project_storage_ensure
from apps.jobs.inference import model_path
from apps.jobs.models import Job
from apps.jobs.paths import job_dir
from apps.jobs.states import TERMINAL
from apps.jobs.tasks import inference_output
from apps.registry.models import ModelVersion
from apps.tenancy.models import AuditEvent, Role
from tests.datasets.conftest import commit, create_dataset, open_version, upload
from tests.jobs.conftest import drive, output, submit
from tests.jobs.test_datasets_jobs import make_version
from tests.jobs.test_self_healing import EXAMPLES, TORCH_VENV
from tests.logs.conftest import es, shipper_loop  # noqa: F401  (fixtures)
from tests.registry.conftest import globex_area, models_area  # noqa: F401  (fixtures)
from tests.registry.test_api import create_model, models_url, upload_version
from tests.registry.test_register_on_success import wait_for_version
from tests.sdk.cli import run_cli

ROWS = 300
IN_DIM = 16


def inputs_csv(rows: int = ROWS, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id"] + [f"x{i}" for i in range(IN_DIM)])
    for index in range(rows):
        writer.writerow([f"r{index:05d}"] + [f"{rng.gauss(0, 1):.6f}" for _ in range(IN_DIM)])
    return out.getvalue().encode()


def example_env() -> dict:
    assert (TORCH_VENV / "bin" / "python").exists(), "run `make examples-venv` (make test does)"
    assert (EXAMPLES / "batch_infer.py").exists(), "run `make examples-venv` (make test does)"
    return {
        "working_dir": str(EXAMPLES),
        "environment": {"type": "venv", "path": str(TORCH_VENV)},
        "resources": {"nodes": 1, "tasks_per_node": 1, "memory": "1G", "time_limit": 10},
        "distributed": {"launcher": "none"},
    }


def inference_spec(**extra) -> dict:
    return {
        "name": "infer",
        "kind": "inference",
        "model": "ddp-mlp@production",
        "datasets": [{"version": "infer-inputs:1", "as": "INPUT"}],
        "output_dataset": {"name": "predictions"},
        **example_env(),
        **extra,
    }


def wait_for_output(job_id, timeout=120) -> DatasetVersion:
    deadline = time.monotonic() + timeout
    while True:
        version = DatasetVersion.objects.filter(source_attempt__job_id=job_id).first()
        if version is not None and version.state == "committed":
            return version
        job = Job.objects.get(pk=job_id)
        assert job.state == "SUCCEEDED" or job.state not in TERMINAL, (
            job.state_reason,
            output(job)[-3000:],
        )
        assert time.monotonic() < deadline, (job.state, job.state_reason)
        time.sleep(0.5)


def download(client, version: DatasetVersion, path: str) -> bytes:
    url = reverse(
        "dataset-version-download",
        kwargs={"dataset_pk": version.dataset_id, "number": version.number},
    )
    response = client.get(url, {"path": path})
    assert response.status_code == 200, response
    return b"".join(response.streaming_content)


def test_an_inference_job_turns_a_registered_model_and_a_dataset_into_predictions(
    acme,
    control_loop,
    shipper_loop,  # noqa: F811  (train_ddp's model is registered once its logs are shipped)
    celery_worker,
    tmp_path,
):
    member = acme.client(Role.MEMBER)
    # 1. train_ddp registers the model (one process, a few steps)
    training = {
        "name": "train",
        "command": ["python", "train_ddp.py", "--steps", "20", "--checkpoint-every", "10"],
        "register_model": {"name": "ddp-mlp", "alias": "production", "framework": "pytorch"},
        **example_env(),
    }
    model_version = wait_for_version(submit(member, acme.project, **training)["id"])
    assert model_version.state == "ready", model_version.error

    # 2. the input dataset, uploaded through the API
    data = inputs_csv()
    dataset = create_dataset(member, acme.project, name="infer-inputs")
    open_version(member, dataset["id"])
    upload(member, dataset["id"], 1, "inputs.csv", data)
    assert commit(member, dataset["id"], 1).status_code == 200
    inputs = DatasetVersion.objects.get(dataset_id=dataset["id"], number=1)

    # 3. the inference job: the model is read-only, the predictions become a version
    probe = 'touch "$TORUS_MODEL_PATH/x" 2>/dev/null && echo MODEL-WRITABLE || echo MODEL-READONLY'
    script = f'{probe}; echo "model=$TORUS_MODEL"; exec python batch_infer.py --batch-size 64'
    body = submit(member, acme.project, **inference_spec(command=script))
    assert body["kind"] == "inference" and body["spec"]["model"] == str(model_version.pk)
    written = wait_for_output(body["id"])
    job = Job.objects.get(pk=body["id"])
    log = output(job)
    assert "MODEL-READONLY" in log and "model=ddp-mlp:1" in log, log[-2000:]
    assert "batch_infer: progress file=inputs.csv rows=64" in log
    attempt = job.attempts.get()
    assert attempt.model_version == model_version
    shown = member.get(reverse("job-detail", args=[job.pk])).json()["attempts"][0]
    assert shown["model_version"]["ref"] == "ddp-mlp:1"
    assert [d["ref"] for d in shown["dataset_versions"]] == ["infer-inputs:1"]
    assert list(attempt.dataset_versions.all()) == [inputs]

    # the new version: committed, written by the attempt, made by the submitter
    assert written.dataset.name == "predictions" and written.number == 1
    assert written.source_attempt == attempt and written.created_by == acme.users[Role.MEMBER]
    assert {f.path for f in written.files.all()} == {"predictions.csv", "summary.json"}
    predictions = download(member, written, "predictions.csv").decode()
    rows = list(csv.reader(io.StringIO(predictions)))
    assert rows[0] == ["id", "prediction"] and len(rows) == ROWS + 1
    assert [r[0] for r in rows[1:]] == [f"r{i:05d}" for i in range(ROWS)]
    summary = json.loads(download(member, written, "summary.json"))
    assert summary["rows"] == ROWS and summary["model"] == "ddp-mlp:1"

    # the same model and inputs, run here by hand, predict the same numbers
    local_in = tmp_path / "in"
    local_in.mkdir()
    (local_in / "inputs.csv").write_bytes(data)
    local = ["--model", str(model_path(model_version)), "--input", str(local_in)]
    local += ["--output", str(tmp_path / "out")]
    subprocess.run(
        [str(TORCH_VENV / "bin" / "python"), str(EXAMPLES / "batch_infer.py"), *local],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert (tmp_path / "out" / "predictions.csv").read_bytes().decode() == predictions

    # lineage: model version -> inference job -> output version, and back
    viewer = acme.client(Role.VIEWER)
    lineage = viewer.get(models_url(model_version.model_id, "versions", 1, "lineage")).json()
    [used] = lineage["inference_jobs"]
    assert used["id"] == str(job.pk) and used["attempts"][0]["number"] == 1
    assert used["attempts"][0]["dataset_versions"] == [str(inputs.pk)]
    assert [d["ref"] for d in used["output_dataset_versions"]] == ["predictions:1"]
    back = viewer.get(f"/api/v1/lineage/dataset-versions/{written.pk}").json()
    assert back["written_by"]["id"] == str(job.pk)
    assert back["written_by"]["attempt"] == str(attempt.pk)
    assert back["written_by"]["model_version"]["ref"] == "ddp-mlp:1"
    assert [d["ref"] for d in back["written_by"]["dataset_versions"]] == ["infer-inputs:1"]
    forward = viewer.get(f"/api/v1/lineage/dataset-versions/{inputs.pk}").json()
    assert [j["id"] for j in forward["jobs"]] == [str(job.pk)]

    # the task again (a redelivered message): still one version
    assert inference_output.apply(args=[str(attempt.pk)]).get() == str(written.pk)
    assert DatasetVersion.objects.filter(dataset=written.dataset).count() == 1

    # a second run appends version 2 of the same dataset
    again = submit(member, acme.project, **inference_spec(command=["python", "batch_infer.py"]))
    second = wait_for_output(again["id"])
    assert second.dataset_id == written.dataset_id and second.number == 2
    assert second.manifest_sha256 != "" and second.files.count() == 2

    # a failed job leaves no version, even when the task is sent anyway
    script = 'mkdir -p "$TORUS_OUTPUT_DIR" && echo x > "$TORUS_OUTPUT_DIR/p.csv"; exit 3'
    failed = drive(submit(member, acme.project, **inference_spec(command=script))["id"])
    assert failed.state == "FAILED", failed.state_reason
    assert (job_dir(failed) / "predictions" / "p.csv").is_file()
    assert inference_output.apply(args=[str(failed.attempts.get().pk)]).get() == ""
    assert DatasetVersion.objects.filter(source_attempt__job=failed).count() == 0
    assert DatasetVersion.objects.filter(dataset=written.dataset).count() == 2


def test_a_job_that_writes_no_predictions_or_a_symlink_leaves_no_version(
    acme,
    slurm_cluster,
    models_area,  # noqa: F811
):
    project_storage_ensure(str(acme.project.pk))  # what the root worker does on first need
    member = acme.client(Role.MEMBER)
    model = create_model(member, acme.project, name="ddp-mlp")
    upload_version(member, model["id"], {"model.pt": b"w"})
    member.put(models_url(model["id"], "aliases", "production"), {"version": 1}, format="json")
    dataset = create_dataset(member, acme.project, name="infer-inputs")
    open_version(member, dataset["id"])
    upload(member, dataset["id"], 1, "inputs.csv", b"id\n")
    commit(member, dataset["id"], 1)
    outside = Path(job_dir(Job(project=acme.project, id=uuid.uuid4()))).parent
    for script, reason in (
        ("true", "wrote no predictions/"),
        (f'ln -s {outside} "$TORUS_OUTPUT_DIR"', "passes through a symlink"),
    ):
        spec = {
            "name": "infer",
            "kind": "inference",
            "model": "ddp-mlp@production",
            "datasets": [{"version": "infer-inputs:1", "as": "INPUT"}],
            "output_dataset": {"name": "predictions"},
            "command": ["bash", "-c", script],
        }
        job = drive(submit(member, acme.project, **spec)["id"])
        assert job.state == "SUCCEEDED", (job.state_reason, output(job))
        assert inference_output.apply(args=[str(job.attempts.get().pk)]).get() == ""
        assert not DatasetVersion.objects.filter(source_attempt__job=job).exists()
        event = AuditEvent.objects.get(action="job.output.failed", target_id=str(job.pk))
        assert reason in event.changes["error"], event.changes
    assert not Dataset.objects.filter(name="predictions").exists()


def test_two_runs_of_the_task_at_once_make_one_version(
    acme,
    slurm_cluster,
    models_area,  # noqa: F811
):
    project_storage_ensure(str(acme.project.pk))
    member = acme.client(Role.MEMBER)
    model = create_model(member, acme.project, name="ddp-mlp")
    upload_version(member, model["id"], {"model.pt": b"w"})
    script = 'mkdir -p "$TORUS_OUTPUT_DIR/part" && seq 1 100 > "$TORUS_OUTPUT_DIR/part/p.csv"'
    spec = {
        "name": "infer",
        "kind": "inference",
        "model": "ddp-mlp:1",
        "output_dataset": {"name": "predictions"},
        "command": ["bash", "-c", script],
    }
    job = drive(submit(member, acme.project, **spec)["id"])
    assert job.state == "SUCCEEDED", (job.state_reason, output(job))
    attempt_id = str(job.attempts.get().pk)
    barrier, results = threading.Barrier(2), []

    def run():
        from django.db import connection

        barrier.wait()
        results.append(inference_output.apply(args=[attempt_id]).get())
        connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [version] = DatasetVersion.objects.filter(source_attempt_id=attempt_id)
    assert results == [str(version.pk)] * 2
    assert version.state == "committed" and version.number == 1
    assert [(f.path, f.size) for f in version.files.all()] == [("part/p.csv", 292)]


@pytest.fixture
def models(acme, globex, models_area, globex_area, cluster):  # noqa: F811
    """acme: ddp-mlp:1 ready (alias production), ddp-mlp:2 open; globex: its own ddp-mlp:1."""
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project, name="ddp-mlp")
    upload_version(client, model["id"], {"model.pt": b"w"})
    client.put(models_url(model["id"], "aliases", "production"), {"version": 1}, format="json")
    response = client.post(models_url(model["id"], "versions"), {}, format="json")
    assert response.status_code == 201, response.content
    theirs = create_model(globex.client(Role.MEMBER), globex.project, name="secret")
    upload_version(globex.client(Role.MEMBER), theirs["id"], {"model.pt": b"s"})
    return {"ours": ModelVersion.objects.get(model_id=model["id"], number=1), "theirs": theirs}


def post(world, **spec):
    body = {"project": str(world.project.id), "name": "t", "command": ["true"], **spec}
    return world.client(Role.MEMBER).post(reverse("job-list"), body, format="json")


def inference(**extra) -> dict:
    return {"kind": "inference", "model": "ddp-mlp:1", "output_dataset": {"name": "out"}, **extra}


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("ddp-mlp:9", "No such model version"),
        ("ddp-mlp@staging", "No such model version"),
        ("nothing@latest", "No such model version"),
        ("ddp-mlp:2", "is open"),
        ("00000000-0000-0000-0000-000000000000", "No such model version"),
        ("../ddp-mlp:1", "Give '<model>:<version number>'"),
        ("file:///etc/passwd", "Give '<model>:<version number>'"),
    ],
)
def test_a_model_that_cannot_be_read_is_a_400_at_the_field(acme, models, model, message):
    response = post(acme, **inference(model=model))
    assert response.status_code == 400, response.content
    assert message in str(response.json()["error"]["fields"]["model"])
    assert not Job.objects.exists()


def test_another_tenants_model_is_not_found(acme, globex, models):
    theirs = ModelVersion.objects.get(model_id=models["theirs"]["id"])
    for ref in (str(theirs.pk), "secret:1", "secret@latest"):
        response = post(acme, **inference(model=ref))
        assert response.status_code == 400, ref
        assert "No such model version" in str(response.json()["error"]["fields"]["model"])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "output",
    [
        {"name": "../etc"},
        {"name": "out", "path": "../other-job"},
        {"name": "out", "path": "%2e%2e/x"},
        {"name": "out", "path": "/etc"},
        {"name": "out", "path": "a/../../b"},
        {"name": "out", "path": "file:///etc"},
        {"path": "predictions"},
        {"name": "out", "extra": 1},
    ],
)
def test_a_bad_output_dataset_is_a_400_at_the_field(acme, models, output):
    response = post(acme, **inference(output_dataset=output))
    assert response.status_code == 400, response.content
    assert "output_dataset" in response.json()["error"]["fields"]
    assert not Job.objects.exists()


def test_the_fields_belong_to_inference_jobs_and_aliases_are_pinned(acme, models):
    response = post(acme, kind="inference")
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"model", "output_dataset"}
    response = post(acme, model="ddp-mlp:1", output_dataset={"name": "out"})
    fields = response.json()["error"]["fields"]
    assert "Only for an inference job" in str(fields["model"]), fields
    for ref in ("ddp-mlp@production", "ddp-mlp@latest", "ddp-mlp:1", str(models["ours"].pk)):
        response = post(acme, **inference(model=ref))
        assert response.status_code == 201, response.content
        spec = response.json()["spec"]
        assert spec["model"] == str(models["ours"].pk)
        assert spec["output_dataset"] == {"name": "out", "path": "predictions"}


def test_the_cli_submits_an_inference_job_from_flags(live_server, acme, models, tmp_path):
    make_version(acme, "infer-inputs", {"inputs.csv": b"id\n"})
    env = {"TORUS_URL": live_server.url, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "cli-infer", "command": ["true"]}))
    flags = ["--model", "ddp-mlp@production", "--dataset", "INPUT=infer-inputs:1"]
    flags += ["--output-dataset", "scores:out/run", "--project", acme.project.slug]
    result = run_cli("--json", "submit", str(spec), *flags, env=env)
    assert result.returncode == 0, result.stderr
    job = Job.objects.get(pk=json.loads(result.stdout)["id"])
    assert job.kind == "inference" and job.spec["model"] == str(models["ours"].pk)
    assert job.spec["output_dataset"] == {"name": "scores", "path": "out/run"}
    assert [d["ref"] for d in job.spec["datasets"]] == ["infer-inputs:1"]

    bad = run_cli("submit", str(spec), "--model", "ddp-mlp:9", *flags[2:], env=env)
    assert bad.returncode != 0 and "No such model version" in bad.stderr, bad.stderr
    bad = run_cli("submit", str(spec), "--dataset", "INPUT", "--project", "x", env=env)
    assert bad.returncode != 0 and "AS=<dataset>:<version>" in bad.stderr
