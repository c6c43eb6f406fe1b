"""Faults, for real: a node taken down, a slurmd killed, slurmctld restarted, and the Celery
worker killed with SIGKILL in the middle of a dispatch. No job is lost or duplicated."""

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from apps.jobs import dispatch, paths
from apps.jobs.models import AttemptState, Job, JobAttempt
from apps.tenancy.models import Role
from tests.factories import make_running_attempt
from tests.jobs.conftest import drive, output, running_node, slurm, slurm_jobs_tagged, submit
from tests.stack import portal_env

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "platform" / "services"
FIRST_ATTEMPT_HANGS = (
    'if [ "$TORUS_ATTEMPT" = 1 ]; then sleep 45; exit 0; fi; echo "done on $SLURMD_NODENAME"'
)


def _pid(pattern: str) -> int:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    pids = [int(p) for p in out.split()]
    assert pids, f"no process matches {pattern!r}"
    return pids[0]


def _start_slurm_daemons() -> None:
    subprocess.run([str(SERVICES / "up"), "slurm"], check=True, capture_output=True, timeout=120)


def _assert_came_back_elsewhere(job: Job, failed_node: str) -> None:
    first, second = job.attempts.order_by("number")[:2]
    assert first.state == AttemptState.NODE_FAIL and failed_node in first.nodes
    assert second.state == AttemptState.SUCCEEDED and failed_node not in second.nodes
    assert second.excluded_nodes == [failed_node]
    restart = job.events.get(to_state="RESTARTING")
    assert failed_node in restart.reason and "attempt 2" in restart.reason
    assert f"done on {second.nodes[0]}" in output(job, 2)


def test_a_node_taken_down_mid_run_brings_the_job_back_on_another_node(acme, slurm_cluster):
    job = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=["bash", "-c", FIRST_ATTEMPT_HANGS],
        restart_policy={"backoff_seconds": 0},
    )
    node = running_node(drive(job["id"], until={"RUNNING"}))
    slurm("scontrol", "update", f"nodename={node}", "state=down", "reason=torus-test")
    finished = drive(job["id"], timeout=90)
    assert finished.state == "SUCCEEDED", finished.state_reason
    assert finished.restart_count == 1
    _assert_came_back_elsewhere(finished, node)


def test_a_killed_slurmd_brings_its_job_back_as_a_new_attempt(acme, slurm_cluster):
    job = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=["bash", "-c", FIRST_ATTEMPT_HANGS],
        restart_policy={"backoff_seconds": 0},
    )
    node = running_node(drive(job["id"], until={"RUNNING"}))
    os.kill(_pid(f"slurmd -f .* -N {node}$"), signal.SIGKILL)
    try:
        finished = drive(job["id"], timeout=120)
    finally:
        _start_slurm_daemons()
        slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    assert finished.state == "SUCCEEDED", finished.state_reason
    _assert_came_back_elsewhere(finished, node)


def test_running_jobs_are_followed_across_a_slurmctld_restart(acme, slurm_cluster):
    client = acme.client(Role.MEMBER)
    job = submit(client, acme.project, command=["bash", "-c", "sleep 8; echo survived"])
    drive(job["id"], until={"RUNNING"})
    ctld = _pid("slurmctld -f ")
    os.kill(ctld, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while subprocess.run(["kill", "-0", str(ctld)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    try:
        from apps.jobs.tasks import control_pass

        for _ in range(3):  # the controller is gone: passes change nothing
            control_pass()
            assert Job.objects.get(pk=job["id"]).state == "RUNNING"
            time.sleep(0.5)
    finally:
        _start_slurm_daemons()
    finished = drive(job["id"], timeout=90)
    assert finished.state == "SUCCEEDED", finished.state_reason
    assert "survived" in output(finished)
    assert finished.attempts.count() == 1


def test_a_job_slurm_queues_again_after_its_attempt_ended_is_cancelled(acme, slurm_cluster):
    """slurmctld SIGKILLed after a job ended, before it saved that, finds the job missing from
    its node when it comes back and requeues it: left there, it would run a second time."""
    from apps.jobs.tasks import control_pass

    job = drive(submit(acme.client(Role.MEMBER), acme.project, command=["true"])["id"])
    assert job.state == "SUCCEEDED", job.state_reason
    ended = job.attempts.get()
    strangers = f"torus:{uuid.uuid4()}"  # a tag no attempt of this platform has
    held = {
        tag: slurm("sbatch", "--parsable", "--hold", f"--comment={tag}", "-p", "gpu",
                   "--wrap", "sleep 60").strip()
        for tag in (ended.tag, strangers)
    }  # fmt: skip
    control_pass()

    def state(tag: str) -> str:
        return slurm("squeue", "-h", "-t", "all", "-j", held[tag], "-o", "%T").strip()

    assert state(ended.tag) == "CANCELLED"
    assert state(strangers) == "PENDING"  # not ours to cancel
    slurm("scancel", held[strangers])
    assert Job.objects.get(pk=job.pk).state == "SUCCEEDED"


def test_a_job_leaves_its_exit_status_beside_its_output(acme, slurm_cluster):
    client = acme.client(Role.MEMBER)
    job = drive(submit(client, acme.project, command=["bash", "-c", "echo hi; exit 3"])["id"])
    assert (job.state, job.exit_code) == ("FAILED", 3), job.state_reason
    assert paths.exit_status(job, 1) == 3
    killed = submit(client, acme.project, command=["bash", "-c", "kill -9 $$"])
    job = drive(killed["id"])
    assert paths.exit_status(job, 1) == 137
    assert job.attempts.get().signal == 9  # the launcher ends by the program's signal too


def test_an_exit_status_is_read_only_whole(logs_dir, monkeypatch):
    """The launcher writes the status in one write, its newline last: a file without one
    (being written, or cut off) is no status, never a shorter number."""
    target = logs_dir / "exit-status"
    monkeypatch.setattr(paths, "exit_file", lambda job, number: target)
    assert paths.exit_status(None, 1) is None  # not written
    for text, status in [("137\n", 137), ("0\n", 0), ("13", None), ("", None), ("999\n", None)]:
        target.write_text(text)
        assert paths.exit_status(None, 1) == status, text


def test_an_attempt_slurm_forgot_after_it_ended_is_not_run_again(acme, slurm_cluster, logs_dir):
    """slurmctld SIGKILLed before it saved a job that then ran to its end has no record of it
    (nor has its accounting): the exit status the launcher left decides, not a new attempt."""
    from apps.jobs.tasks import control_pass

    outcomes = {}
    for status in (0, None):
        attempt = make_running_attempt(world=acme, cluster=slurm_cluster, directory=logs_dir)
        JobAttempt.objects.filter(pk=attempt.pk).update(
            backend_id="999999", submitted_at=timezone.now() - timedelta(minutes=5)
        )
        if status is not None:
            paths.attempt_dir(attempt.job, 1).mkdir(parents=True)
            paths.exit_file(attempt.job, 1).write_text(f"{status}\n")
        outcomes[status] = attempt.job_id
    control_pass()
    forgotten = Job.objects.get(pk=outcomes[0])
    assert forgotten.state == "SUCCEEDED", forgotten.state_reason
    assert [a.state for a in forgotten.attempts.all()] == ["SUCCEEDED"]
    assert "exit status 0" in forgotten.attempts.get().backend_reason
    lost = Job.objects.get(pk=outcomes[None])
    assert lost.attempts.get(number=1).state == "LOST"


def test_a_job_requeued_after_its_program_ended_is_not_run_again(acme, slurm_cluster):
    """slurmctld SIGKILLed before it saved a job's end comes back with it still running and
    requeues it as missing from its node (here: `scontrol requeue` once the job has ended,
    before the platform has seen that)."""
    job = submit(acme.client(Role.MEMBER), acme.project, command=["true"])
    attempt = drive(job["id"], until={"SUBMITTED", "RUNNING"}).attempts.get()
    deadline = time.monotonic() + 60
    while "COMPLETED" not in slurm(
        "squeue", "-h", "-t", "all", "-j", attempt.backend_id, "-o", "%T"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    slurm("scontrol", "requeue", attempt.backend_id)
    finished = drive(job["id"])
    assert finished.state == "SUCCEEDED", finished.state_reason
    assert [(a.state, a.backend_state) for a in finished.attempts.all()] == [("SUCCEEDED", "ENDED")]
    state = slurm("squeue", "-h", "-t", "all", "-j", attempt.backend_id, "-o", "%T").strip()
    assert state == "CANCELLED"  # the requeued copy never runs


def _worker_env() -> dict:
    return portal_env(TORUS_DISPATCH_THREADS="1", TORUS_DISPATCH_GRACE_SECONDS="2")


@pytest.mark.usefixtures("slurm_cluster")
def test_worker_killed_mid_dispatch_loses_and_duplicates_nothing(acme, settings):
    settings.TORUS_DISPATCH_GRACE_SECONDS = 2
    from config.celery import app

    app.control.purge()  # nothing left over from earlier tests in the test broker
    client = acme.client(Role.ADMIN)
    ids = [submit(client, acme.project, command=["true"])["id"] for _ in range(40)]
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "WARNING",
        ],
        cwd=ROOT,
        env=_worker_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    attempts = JobAttempt.objects.filter(job_id__in=ids)
    tags = {f"torus:{pk}" for pk in attempts.values_list("pk", flat=True)}
    try:  # kill it once Slurm has accepted some of the claimed attempts, before any is recorded
        deadline = time.monotonic() + 60
        while not tags & set(slurm("squeue", "-h", "-o", "%k").split()):
            assert time.monotonic() < deadline, "the worker never dispatched"
            time.sleep(0.01)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    in_flight = attempts.filter(state=AttemptState.SUBMITTING).count()
    assert in_flight > 0, "the kill came too late to interrupt the dispatch"
    orphans = tags & set(slurm("squeue", "-h", "-t", "all", "-o", "%k").split())
    assert orphans, "Slurm accepted none of them before the kill"
    time.sleep(2.2)
    dispatch.dispatch_cluster(cluster_id=Job.objects.get(pk=ids[0]).cluster_id)
    for attempt in attempts:
        assert attempt.state == AttemptState.SUBMITTED, attempt.state
        assert slurm_jobs_tagged(attempt.tag) == [attempt.backend_id]
    for job_id in ids:
        finished = drive(job_id)
        assert finished.state == "SUCCEEDED", finished.state_reason
