"""Fixtures for jobs on the real Slurm cluster that platform/services runs."""

import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.urls import reverse

from apps.compute.backends import for_cluster
from apps.compute.envfile import read_env_file
from apps.compute.models import Cluster
from apps.identity.services import group_name
from apps.jobs import cluster_limits
from apps.jobs.models import Job, JobAttempt
from apps.jobs.states import TERMINAL
from apps.jobs.tasks import control_pass
from apps.quotas.models import Quota
from apps.tenancy.models import Role
from tests.conftest import background_loop


def slurm_env() -> dict:
    env_file = Path(settings.VAR_DIR) / "slurm" / "env"
    assert env_file.is_file(), f"{env_file} missing: the Slurm service is not up"
    return {**os.environ, **read_env_file(env_file)}


def slurm(*args: str, check: bool = True) -> str:
    result = subprocess.run(
        list(args), env=slurm_env(), capture_output=True, text=True, timeout=60, check=False
    )
    if check:
        assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def slurm_jobs_tagged(tag: str) -> list[str]:
    """Slurm job ids carrying a tag, from the controller itself (squeue)."""
    out = slurm("squeue", "-h", "-a", "-t", "all", "-o", "%i|%k")
    return [line.split("|")[0] for line in out.splitlines() if line.endswith(f"|{tag}")]


@pytest.fixture
def slurm_cluster(transactional_db, settings):
    """The local Slurm cluster registered in the test database; cleaned up afterwards."""
    settings.TORUS_LOST_AFTER_SECONDS = 30
    call_command("cluster_register_local", verbosity=0)
    cluster = Cluster.objects.get(name="local")
    yield cluster
    # this test's jobs only: a platform running on the same cluster keeps its own
    ours = {attempt.tag for attempt in JobAttempt.objects.all()}
    for job_id in slurm("squeue", "-h", "-o", "%i|%k").splitlines():
        if job_id.split("|")[1] in ours:
            slurm("scancel", job_id.split("|")[0], check=False)
    for node in ("n1", "n2"):
        slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)


@pytest.fixture
def control_loop(slurm_cluster):
    """Control passes every 0.5 s in a thread, as Celery beat runs them in production."""
    with background_loop(control_pass, interval=0.5):
        yield


def drive(job_id, *, until: set[str] | None = None, timeout: float = 90, condition=None) -> Job:
    """Run control passes (reconcile, dispatch, admit) until the job reaches a state in
    `until` (default: any terminal state) or `condition(job)` holds."""
    until = until or set(TERMINAL)
    deadline = time.monotonic() + timeout
    while True:
        control_pass()
        job = Job.objects.get(pk=job_id)
        if (condition and condition(job)) or (not condition and job.state in until):
            return job
        assert time.monotonic() < deadline, (
            f"job stuck in {job.state}: {job.state_reason}; "
            f"attempts {[(a.number, a.state, a.backend_id) for a in job.attempts.all()]}"
        )
        time.sleep(0.2)  # a pass is cheap; Slurm's own turn is what the job waits for


@contextlib.contextmanager
def tenant_quota_in_use(world, cluster):
    """Slurm holds the tenant's GPU quota (2 GPUs: its account's GrpTRES) and a 2-GPU job of
    the tenant runs, so its next GPU job waits in Slurm on AssocGrpGRES; yields the running
    job's id. The limit is lifted on leaving."""
    cluster.config = {**cluster.config, "tenant_gpu_quota": "slurm"}
    cluster.save()
    Quota.objects.create(tenant=world.tenant, gpus=2)
    try:
        first = submit(
            world.client(Role.MEMBER),
            world.project,
            command=["sleep", "60"],
            resources={"gpus_per_node": 2},
        )["id"]
        drive(first, until={"RUNNING"})
        yield first
    finally:
        for_cluster(cluster).tenant_gpu_limit(
            tenant=world.tenant.slug, account=group_name(tenant=world.tenant), gpus=None
        )
        cluster_limits.forget(cluster=cluster, tenant_ids=[world.tenant.pk])


def submit(client, project, **spec) -> dict:
    body = {"project": str(project.id), "name": "t", **spec}
    response = client.post(reverse("job-list"), body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def output(job: Job, number: int = 1) -> str:
    attempt = job.attempts.get(number=number)
    return Path(attempt.stdout_path).read_text() + Path(attempt.stderr_path).read_text()


READ_RPCS = (
    "REQUEST_JOB_INFO",
    "REQUEST_NODE_INFO",
    "REQUEST_PARTITION_INFO",
    "REQUEST_JOB_USER_INFO",
    "REQUEST_JOB_STEP_INFO",
)


def sdiag_rpcs() -> int:
    """Read RPCs (job, node, partition info: what a reconciler issues) the controller served
    since the last `sdiag --reset`. Daemons' own traffic (launches, completions) is not
    counted, so jobs starting and ending meanwhile do not blur the figure."""
    out = slurm("sdiag")
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    total = 0
    for line in section.splitlines():
        name, _, rest = line.strip().partition("(")
        if "count:" in rest and name.strip().startswith(READ_RPCS):
            total += int(rest.split("count:", 1)[1].split()[0])
    return total


def running_node(job: Job) -> str:
    return job.attempts.order_by("-number").first().nodes[0]
