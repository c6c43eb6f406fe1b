"""One attempt that cannot be reconciled never stops the pass, nor one cluster the others:
real bad states in front of the reconciler on the real Slurm cluster, while another tenant's
job reconciles to its end."""

import shutil
import uuid

import pytest
from django.db import connection

from apps.compute.models import Cluster
from apps.compute.selectors import clusters_controlled
from apps.core.models import PassCounter, PassFailure
from apps.jobs import dispatch, paths, reconcile
from apps.jobs.models import AttemptState, Job, JobAttempt
from apps.jobs.tasks import control_pass
from apps.tenancy.models import Role
from tests.conftest import make_world
from tests.jobs.conftest import drive, submit


@pytest.fixture
def fresh(db):
    """A tenant of its own (new people, new groups): Slurm's controller caches a person's
    groups for a while, and a project group made again under the same name gets a new gid."""
    return make_world(f"r{uuid.uuid4().hex[:7]}")


def _job(world, command) -> str:
    return submit(world.client(Role.ADMIN), world.project, command=list(command))["id"]


def test_a_job_directory_that_vanished_ends_that_attempt_and_others_reconcile(
    fresh, globex, slurm_cluster
):
    gone = _job(fresh, ("sleep", "3"))
    drive(gone, until={"RUNNING"})
    job = Job.objects.get(pk=gone)
    shutil.rmtree(paths.job_dir(job))  # its files, checkpoints and exit status with it
    fine = _job(globex, ("echo", "hello"))
    assert drive(fine).state == "SUCCEEDED"
    ended = drive(gone)
    attempt = ended.attempts.get()
    assert attempt.state in (AttemptState.FAILED, AttemptState.SUCCEEDED), attempt.state
    assert attempt.reason and ended.state_reason  # the user reads how it ended
    assert not PassFailure.objects.filter(pass_name="reconcile").exists()


def test_an_attempt_whose_state_cannot_be_applied_fails_after_some_passes_others_go_on(
    acme, globex, slurm_cluster, caplog
):
    """A job row an older version wrote (its spec has no restart_policy): applying its end
    raises KeyError every pass. It is left for the next pass, counted, logged once, and failed
    with the reason after reconcile.GIVE_UP_AFTER passes; globex's job ends meanwhile."""
    broken = _job(acme, ("true",))
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET spec = spec - 'restart_policy' WHERE id = %s", [broken])
    fine = _job(globex, ("true",))
    drive(  # checked at the first pass that fails on it: a loaded machine may take the
        broken,  # other job past GIVE_UP_AFTER passes, and then it is failed, as designed
        condition=lambda job: PassFailure.objects.filter(
            pass_name="reconcile", item_key__startswith="attempt:"
        ).exists(),
    )
    key = f"attempt:{JobAttempt.objects.get(job_id=broken).pk}"
    failure = PassFailure.objects.get(pass_name="reconcile", item_key=key)
    assert "KeyError: 'restart_policy'" in failure.error
    assert failure.count < reconcile.GIVE_UP_AFTER
    assert Job.objects.get(pk=broken).state in ("SUBMITTED", "RUNNING")  # left, not failed
    assert drive(fine).state == "SUCCEEDED"
    job = drive(broken)  # until GIVE_UP_AFTER passes have failed it
    attempt = job.attempts.get()
    assert job.state == "FAILED"
    assert attempt.state == AttemptState.FAILED
    assert attempt.reason == "could not be reconciled: KeyError: 'restart_policy'"
    assert job.state_reason == attempt.reason
    assert PassCounter.objects.get(pass_name="reconcile").failures >= reconcile.GIVE_UP_AFTER
    logged = [r for r in caplog.records if key in r.getMessage() and r.levelname == "WARNING"]
    assert len(logged) == 1
    reconcile.PASS.open(fresh=True)
    reconcile.reconcile_cluster(cluster_id=slurm_cluster.pk)  # ended: no longer an item
    assert not PassFailure.objects.filter(pass_name="reconcile", item_key=key).exists()


def test_a_cluster_whose_backend_is_gone_under_a_job_keeps_no_other_cluster_waiting(
    fresh, globex, slurm_cluster
):
    """A job's cluster can no longer be reached through any backend of this installation (its
    backend removed): its reconcile raises every control pass. That cluster is marked with
    the error and its job left as it is; the local cluster's jobs of another tenant run, and
    tenants are still admitted."""
    stranded = _job(fresh, ("sleep", "30"))
    drive(stranded, until={"SUBMITTED", "RUNNING"})
    gone = Cluster.objects.create(name="a-gone", backend="retired")  # listed before "local"
    Job.objects.filter(pk=stranded).update(cluster=gone)
    fine = _job(globex, ("true",))
    assert drive(fine).state == "SUCCEEDED"
    gone.refresh_from_db()
    assert not gone.healthy
    assert gone.last_error == (
        "reconcile failed: NotImplementedError: no backend for 'retired' clusters"
    )
    failure = PassFailure.objects.get(pass_name="control", item_key="reconcile:a-gone")
    assert failure.count >= 1
    assert Job.objects.get(pk=stranded).state in ("SUBMITTED", "RUNNING")  # left as it was
    control_pass()
    assert PassFailure.objects.get(pk=failure.pk).count > failure.count
    Job.objects.filter(pk=stranded).update(cluster=slurm_cluster)  # put back: it ends
    assert drive(stranded, until={"RUNNING", "SUCCEEDED"}).state in ("RUNNING", "SUCCEEDED")


def test_a_cluster_of_another_control_plane_is_left_to_that_plane(db, settings):
    """Deployments sharing one database (each with its own broker and cache) split the
    clusters by Cluster.config control_plane: a worker drives only its plane's clusters."""
    there = Cluster.objects.create(
        name="a-there", backend="retired", config={"control_plane": "there"}
    )
    assert clusters_controlled(plane="there").get() == there
    assert there not in clusters_controlled(plane="")
    assert Cluster.objects.create(name="a-here", backend="retired") in clusters_controlled(plane="")
    settings.TORUS_CONTROL_PLANE = "elsewhere"  # neither cluster is this plane's: untouched
    control_pass()
    assert not PassFailure.objects.filter(pass_name="control").exists()
    settings.TORUS_CONTROL_PLANE = "there"  # its own plane drives it (and fails: no backend)
    control_pass()
    failure = PassFailure.objects.get(pass_name="control", item_key="reconcile:a-there")
    assert "no backend for 'retired' clusters" in failure.error
    assert not PassFailure.objects.filter(item_key__contains="a-here").exists()
