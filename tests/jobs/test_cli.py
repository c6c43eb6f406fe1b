"""`torus submit --wait`, `jobs`, `show`, `logs`, `cancel` against a live portal and real Slurm.

The live server runs in a thread; control passes (reconcile + dispatch) run beside it the
way Celery beat runs them in production.
"""

import json

import pytest
import yaml

from apps.tenancy.models import Role
from tests.sdk.cli import run_cli


@pytest.fixture
def env(live_server, acme):
    return {"TORUS_URL": live_server.url, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}


def test_submit_wait_show_logs(env, acme, control_loop, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "cli-hello",
                "command": ["bash", "-c", "echo out-line; echo err-line >&2"],
                "resources": {"gpus_per_node": 1},
            }
        )
    )
    done = run_cli(
        "submit", str(spec), "--project", acme.project.slug, "--wait", "--poll", "0.3", env=env
    )
    assert done.returncode == 0, done.stderr
    assert "[cli-hello] QUEUED" in done.stderr and "[cli-hello] SUCCEEDED" in done.stderr
    job_id = done.stdout.splitlines()[1].split()[0]
    assert run_cli("logs", job_id, env=env).stdout == "out-line\n"
    assert run_cli("logs", job_id, "--stderr", env=env).stdout == "err-line\n"
    shown = run_cli("show", job_id, env=env).stdout
    assert "SUCCEEDED" in shown and "timeline" in shown and "PENDING" in shown
    listed = json.loads(run_cli("--json", "jobs", "--state", "SUCCEEDED", env=env).stdout)
    assert [j["id"] for j in listed] == [job_id]


def test_wait_exits_1_when_the_job_fails(env, acme, control_loop, tmp_path):
    spec = tmp_path / "fail.json"
    spec.write_text(
        json.dumps(
            {"project": str(acme.project.id), "name": "boom", "command": ["bash", "-c", "exit 7"]}
        )
    )
    done = run_cli("submit", str(spec), "--wait", "--poll", "0.3", env=env)
    assert done.returncode == 1
    assert "FAILED" in done.stdout and "exit code 7" in done.stdout


def test_cli_refuses_bad_specs_with_a_message(env, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    result = run_cli("submit", str(bad), env=env)
    assert result.returncode == 1 and result.stderr.startswith("torus: ")
    assert "Traceback" not in result.stderr
    missing = run_cli("submit", str(tmp_path / "nope.yaml"), env=env)
    assert missing.returncode == 1 and "cannot read" in missing.stderr
    bad.write_text(yaml.safe_dump({"name": "x", "command": ["true"]}))
    no_project = run_cli("submit", str(bad), env=env)
    assert "say which project" in no_project.stderr


def test_cli_shows_field_errors_from_the_api(env, acme, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "project": str(acme.project.id),
                "name": "bad name",
                "command": ["true"],
                "resources": {"gpus_per_node": 99},
            }
        )
    )
    result = run_cli("submit", str(bad), env=env)
    assert result.returncode == 1
    assert "name:" in result.stderr and "resources:" in result.stderr
