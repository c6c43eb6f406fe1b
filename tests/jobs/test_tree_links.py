"""The readers of a job's tree in apps/jobs and apps/serving go through the one reader of
tenants' trees (apps/identity/tree.py): an inference job's output directory, a replica's
stderr and a node's dataset cache, each with a link into ANOTHER tenant's tree as a parent,
read nothing of it; the same read of a real directory works (control). The trees are made by
hand, the links as a job's uid (setpriv), as a job leaves them."""

import os
import time

import pytest

from apps.datasets.models import DatasetVersion
from apps.identity.storage import project_root
from apps.jobs import paths
from apps.jobs.inference import output_register
from apps.jobs.models import Job, JobAttempt
from apps.jobs.node_cache import node_sweep
from apps.serving.replicas import log_tail
from apps.tenancy.models import AuditEvent, Role
from tests import tenant_tree
from tests.factories import make_job
from tests.jobs.test_node_cache import NODE, area, staged, subtree  # noqa: F401  (fixture)

JOB_UID = 250030


def as_job(script: str, cwd) -> None:
    tenant_tree.as_job(script, cwd, uid=JOB_UID)


def finished_job(world, **spec) -> tuple[Job, JobAttempt]:
    """A succeeded job of the world's member, its first attempt, and its directory (its
    user's), with the spec fields given."""
    job = make_job(
        project=world.project, user=world.users[Role.MEMBER], state="SUCCEEDED", gpus_per_node=0
    )
    Job.objects.filter(pk=job.pk).update(spec={**job.spec, **spec})
    job.refresh_from_db()
    attempt = JobAttempt.objects.create(
        job=job,
        number=1,
        state="SUCCEEDED",
        stdout_path=str(paths.attempt_dir(job, 1) / "stdout.log"),
        stderr_path=str(paths.attempt_dir(job, 1) / "stderr.log"),
    )
    directory = paths.job_dir(job)
    directory.mkdir(parents=True)  # its parents 0755 (the tree's modes are not the point)
    os.chown(directory, JOB_UID, JOB_UID)
    return job, attempt


@pytest.mark.django_db(transaction=True)
def test_an_inference_output_linked_into_another_tenant_is_not_taken(acme, globex):
    theirs, _ = finished_job(globex)
    as_job("mkdir predictions && echo globex-secret > predictions/p.csv", paths.job_dir(theirs))
    output = {"output_dataset": {"name": "predictions", "path": "predictions"}}
    linker, linker_attempt = finished_job(acme, **output)
    as_job(
        f"ln -s {paths.job_dir(theirs)} out && ln -s out/predictions predictions",
        paths.job_dir(linker),
    )
    # the same output one level down: a link as the parent of the output directory
    parent = {"output_dataset": {"name": "predictions", "path": "out/predictions"}}
    deep, deep_attempt = finished_job(acme, **parent)
    as_job(f"ln -s {paths.job_dir(theirs)} out", paths.job_dir(deep))
    real, real_attempt = finished_job(acme, **output)
    as_job("mkdir predictions && echo mine > predictions/p.csv", paths.job_dir(real))

    assert output_register(attempt=linker_attempt) is None
    assert output_register(attempt=deep_attempt) is None
    for job in (linker, deep):
        event = AuditEvent.objects.get(action="job.output.failed", target_id=str(job.pk))
        assert "passes through a symlink" in event.changes["error"], event.changes
        assert "is a symbolic link" in event.changes["error"]
    assert not DatasetVersion.objects.filter(source_attempt__in=[linker_attempt, deep_attempt])
    # control: a real directory is taken
    version = output_register(attempt=real_attempt)
    assert version is not None and version.state == "committed"
    assert [(f.path, f.size) for f in version.files.all()] == [("p.csv", 5)]
    datasets = project_root(acme.project) / "datasets"
    stored = b"".join(p.read_bytes() for p in datasets.rglob("*") if p.is_file())
    assert b"mine\n" in stored and b"globex-secret" not in stored


@pytest.mark.django_db
def test_a_replicas_stderr_through_a_linked_attempt_directory_is_not_read(acme, globex):
    theirs, _ = finished_job(globex)
    as_job(
        "mkdir attempt-1 && echo 'globex engine secret' > attempt-1/stderr.log",
        paths.job_dir(theirs),
    )
    linker, _ = finished_job(acme)
    as_job(f"ln -s {paths.job_dir(theirs)}/attempt-1 attempt-1", paths.job_dir(linker))
    real, _ = finished_job(acme)
    as_job("mkdir attempt-1 && echo 'model not found' > attempt-1/stderr.log", paths.job_dir(real))
    assert log_tail(job=linker) == ""
    assert log_tail(job=real) == "model not found"  # control


def test_a_node_cache_linked_into_another_tenant_is_not_swept(area):  # noqa: F811
    """globex's tenant directory and a project directory on the node are links to acme's:
    acme's bytes are counted once, as acme's (control), never again through the links."""
    mine = subtree(area, "acme", "vision", 299101)
    staged(area, mine, 1000, time.time() - 100)
    (area / NODE / "globex").symlink_to(area / NODE / "acme")
    other = area / NODE / "initech"
    other.mkdir(mode=0o755)
    (other / "nlp").symlink_to(area / NODE / "acme" / "vision")
    outcome = node_sweep(node_dir=area / NODE, cap=10**9)
    assert outcome == {"bytes_before": 1000, "bytes_after": 1000, "evicted_versions": 0}
    # the node's directory itself a link: nothing is swept through it
    (area / "n9").symlink_to(area / NODE)
    assert node_sweep(node_dir=area / "n9", cap=10)["bytes_before"] == 0
