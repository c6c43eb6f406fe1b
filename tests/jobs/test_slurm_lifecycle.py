"""Jobs on the real Slurm cluster: dispatch, follow, finish, fail, cancel, time out."""

import time
from pathlib import Path

import pytest
from django.urls import reverse

from apps.jobs.models import AttemptState, Job
from apps.quotas.models import UsageRecord
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, output, slurm, slurm_jobs_tagged, submit


def test_hello_job_is_dispatched_by_celery_after_commit_and_succeeds(
    acme, slurm_cluster, celery_worker
):
    job = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=["bash", "-c", "echo hello from $RANK on $(hostname)"],
        resources={"gpus_per_node": 1},
    )
    deadline = time.monotonic() + 30
    while not Job.objects.get(pk=job["id"]).attempts.exclude(backend_id="").exists():
        assert time.monotonic() < deadline, "the Celery dispatcher never submitted the job"
        time.sleep(0.2)
    finished = drive(job["id"])
    assert finished.state == "SUCCEEDED", finished.state_reason
    attempt = finished.attempts.get()
    assert attempt.state == AttemptState.SUCCEEDED and attempt.exit_code == 0
    assert slurm_jobs_tagged(attempt.tag) == [attempt.backend_id]
    assert "hello from 0" in output(finished)
    states = [e.to_state for e in finished.events.order_by("created_at")]
    assert states[:3] == ["PENDING", "QUEUED", "SUBMITTED"] and states[-1] == "SUCCEEDED"
    record = UsageRecord.objects.get(attempt=attempt)
    assert record.gpus == 1 and record.gpu_seconds == pytest.approx(attempt.gpu_seconds)
    detail = acme.client(Role.VIEWER).get(reverse("job-detail", kwargs={"pk": job["id"]})).json()
    assert detail["attempts"][0]["backend_id"] == attempt.backend_id


def test_every_process_gets_the_distributed_environment(acme, slurm_cluster):
    probe = (
        'echo "rank=$RANK local=$LOCAL_RANK node=$NODE_RANK world=$WORLD_SIZE '
        'master=$MASTER_ADDR:$MASTER_PORT gpus=$CUDA_VISIBLE_DEVICES"'
    )
    job = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=["bash", "-c", probe],
        resources={"nodes": 2, "tasks_per_node": 2, "gpus_per_node": 2},
    )
    finished = drive(job["id"])
    assert finished.state == "SUCCEEDED", finished.state_reason
    lines = sorted(line for line in output(finished).splitlines() if line.startswith("rank="))
    fields = [dict(item.split("=", 1) for item in line.split()) for line in lines]
    assert [f["rank"] for f in fields] == ["0", "1", "2", "3"]
    assert {(f["rank"], f["local"], f["node"]) for f in fields} == {
        ("0", "0", "0"),
        ("1", "1", "0"),
        ("2", "0", "1"),
        ("3", "1", "1"),
    }
    assert {f["world"] for f in fields} == {"4"}
    assert len({f["master"] for f in fields}) == 1
    assert fields[0]["master"].startswith("127.0.0.")
    assert {f["gpus"] for f in fields} == {"0,1"}
    assert len(set(finished.attempts.get().nodes)) == 2


def test_hostile_arguments_and_environment_arrive_as_literal_data(acme, slurm_cluster, tmp_path):
    marker = tmp_path / "pwned"
    evil = [
        f"$(touch {marker})",
        f"`touch {marker}`",
        "a'b\"c",
        "line1\nline2",
        "\n#SBATCH --uid=0",
        "; echo injected",
        "$HOME",
        "  spaced  ",
    ]
    code = "import os, sys; print(repr(sys.argv[1:])); print(repr(os.environ['EVIL']))"
    job = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=["python3", "-c", code, *evil],
        env={"EVIL": evil[0] + evil[3]},
    )
    finished = drive(job["id"])
    assert finished.state == "SUCCEEDED", output(finished)
    lines = output(finished).splitlines()
    assert lines[0] == repr(evil)
    assert lines[1] == repr(evil[0] + evil[3])
    assert not marker.exists()


def test_script_bodies_run_with_bash(acme, slurm_cluster):
    job = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command="set -e\nfor i in 1 2 3; do echo line $i; done\n",
    )
    finished = drive(job["id"])
    assert finished.state == "SUCCEEDED"
    assert "line 1\nline 2\nline 3" in output(finished)


def test_a_failing_program_fails_the_job_with_its_exit_code(acme, slurm_cluster):
    job = submit(acme.client(Role.MEMBER), acme.project, command=["bash", "-c", "exit 3"])
    finished = drive(job["id"])
    assert finished.state == "FAILED"
    assert finished.exit_code == 3 and finished.restart_count == 0
    assert "exit code 3" in finished.state_reason
    assert finished.attempts.count() == 1


def test_listed_exit_codes_are_retried_up_to_the_limit(acme, slurm_cluster):
    job = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=["bash", "-c", "exit 3"],
        restart_policy={"max_restarts": 2, "exit_codes": [3], "backoff_seconds": 0},
    )
    finished = drive(job["id"], timeout=120)
    assert finished.state == "FAILED" and finished.restart_count == 2
    assert [a.state for a in finished.attempts.order_by("number")] == ["FAILED"] * 3
    assert "no restarts left" in finished.state_reason
    reasons = [e.reason for e in finished.events.filter(to_state="RESTARTING")]
    assert len(reasons) == 2 and "restart 1 of 2" in reasons[0]


def test_cancel_a_running_job(acme, slurm_cluster):
    client = acme.client(Role.MEMBER)
    job = submit(client, acme.project, command=["sleep", "300"])
    drive(job["id"], until={"RUNNING"})
    response = client.post(reverse("job-cancel", kwargs={"pk": job["id"]}))
    assert response.status_code == 200 and response.json()["cancel_requested"] is True
    finished = drive(job["id"])
    assert finished.state == "CANCELLED"
    attempt = finished.attempts.get()
    assert "CANCELLED" in slurm("sacct", "-n", "-X", "-P", "-o", "State", "-j", attempt.backend_id)
    again = client.post(reverse("job-cancel", kwargs={"pk": job["id"]}))
    assert again.status_code == 409


def test_cancel_before_dispatch_never_reaches_slurm(acme, slurm_cluster):
    client = acme.client(Role.MEMBER)
    job = submit(client, acme.project, command=["true"])
    assert (
        client.post(reverse("job-cancel", kwargs={"pk": job["id"]})).json()["state"] == "CANCELLED"
    )
    drive(job["id"])
    attempt = Job.objects.get(pk=job["id"]).attempts.get()
    assert attempt.backend_id == "" and slurm_jobs_tagged(attempt.tag) == []


def test_a_job_past_its_time_limit_times_out(acme, slurm_cluster):
    job = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=["sleep", "600"],
        resources={"time_limit": 1},
    )
    finished = drive(job["id"], timeout=150)
    assert finished.state == "TIMEOUT"
    assert "time limit of 1 minutes" in finished.state_reason
    assert finished.attempts.get().state == AttemptState.TIMEOUT


def test_a_job_waiting_in_slurm_shows_why(acme, slurm_cluster):
    client = acme.client(Role.ADMIN)
    hog = submit(
        client, acme.project, command=["sleep", "300"], resources={"nodes": 3, "gpus_per_node": 4}
    )
    drive(hog["id"], until={"RUNNING"})
    waiting = submit(client, acme.project, command=["true"], resources={"gpus_per_node": 1})
    job = drive(waiting["id"], condition=lambda j: "waiting in Slurm: " in j.state_reason)
    assert job.state == "SUBMITTED"
    assert job.state_reason in ("waiting in Slurm: Resources", "waiting in Slurm: Priority")
    client.post(reverse("job-cancel", kwargs={"pk": hog["id"]}))
    assert drive(waiting["id"]).state == "SUCCEEDED"


def test_restart_runs_a_finished_job_again(acme, slurm_cluster):
    client = acme.client(Role.MEMBER)
    job = submit(client, acme.project, command=["bash", "-c", "echo attempt $TORUS_ATTEMPT"])
    drive(job["id"])
    response = client.post(reverse("job-restart", kwargs={"pk": job["id"]}))
    assert response.status_code == 200 and response.json()["state"] in ("PENDING", "QUEUED")
    finished = drive(job["id"])
    assert finished.state == "SUCCEEDED" and finished.attempts.count() == 2
    assert "attempt 2" in output(finished, 2)
    assert Path(finished.attempts.get(number=1).stdout_path).exists()
