"""`torus submit --quiet` prints only the job's id (the README keeps it: JOB=$(torus submit
...)); with --wait, only the id once the job has ended, and the exit status says whether it
succeeded. Against a live portal and real Slurm (control passes beside it, as Celery beat)."""

import pytest
import yaml

from apps.jobs.models import Job
from apps.tenancy.models import Role
from tests.jobs.conftest import control_loop, slurm_cluster  # noqa: F401  (fixtures)
from tests.sdk.cli import run_cli


@pytest.mark.usefixtures("control_loop")
def test_submit_quiet_prints_the_job_id_alone(live_server, acme, tmp_path):
    env = {"TORUS_URL": live_server.url, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "quiet", "command": ["bash", "-c", "echo hi"]}))
    project = ("--project", acme.project.slug)

    queued = run_cli("submit", str(spec), *project, "--quiet", env=env)
    assert queued.returncode == 0, queued.stderr
    assert Job.objects.filter(pk=queued.stdout.strip(), name="quiet").exists()
    assert queued.stdout.count("\n") == 1 and queued.stderr == ""

    done = run_cli("submit", str(spec), *project, "--wait", "-q", "--poll", "0.3", env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert Job.objects.get(pk=done.stdout.strip()).state == "SUCCEEDED"

    spec.write_text(yaml.safe_dump({"name": "boom", "command": ["bash", "-c", "exit 7"]}))
    failed = run_cli("submit", str(spec), *project, "--wait", "-q", "--poll", "0.3", env=env)
    assert failed.returncode == 1
    assert Job.objects.get(pk=failed.stdout.strip()).state == "FAILED"
