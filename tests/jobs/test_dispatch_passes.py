"""One job that cannot be prepared never stops a dispatch pass: it is held in the queue with a
reason its user sees, counted and logged once, and every other tenant's job is dispatched and
runs on the real Slurm cluster (issue 34: the wedge an orphaned group row caused)."""

import logging
import os
import uuid

from django.db import connection

from apps.core.models import PassCounter, PassFailure
from apps.identity import privileged
from apps.identity.models import GroupKind, PosixGroup
from apps.identity.services import _allocate, group_ensure, group_name
from apps.identity.storage import project_root
from apps.jobs import dispatch
from apps.jobs.models import AttemptState, Job, JobAttempt
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, slurm_jobs_tagged, submit


def _job(world, command=("true",)) -> str:
    return submit(world.client(Role.ADMIN), world.project, command=list(command))["id"]


def _failure(job_id) -> PassFailure | None:
    return PassFailure.objects.filter(pass_name="dispatch", item_key=f"job:{job_id}").first()


def test_a_group_missing_from_the_directory_holds_its_job_and_the_others_run(
    acme, globex, slurm_cluster, caplog
):
    """acme's project group row names a group the directory does not hold (deleted there by
    hand): preparing acme's job raises LDAP's NO_SUCH_OBJECT, which no code foresaw. The pass
    holds that job with the reason and dispatches globex's, which runs."""
    group_ensure(tenant=acme.tenant)  # the tenant group is fine
    PosixGroup.objects.create(
        kind=GroupKind.PROJECT,
        tenant=acme.tenant,
        project=acme.project,
        name=f"p-gone{uuid.uuid4().hex[:8]}",
        gid=_allocate("gid"),  # never written to the directory
    )
    held = _job(acme)
    fine = _job(globex)  # admitted after acme's: the same pass meets acme's first
    caplog.set_level(logging.WARNING, logger="apps.core.passes")
    for _ in range(2):
        dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)

    job = Job.objects.get(pk=held)
    assert job.state == "QUEUED"
    assert job.state_reason.startswith("could not prepare its identity: NO_SUCH_OBJECT"), (
        job.state_reason
    )
    assert JobAttempt.objects.get(job_id=held).state == AttemptState.QUEUED  # retried later
    failure = _failure(held)
    assert failure.count == 2 and "NO_SUCH_OBJECT" in failure.error
    assert PassCounter.objects.get(pass_name="dispatch").failures == 2
    logged = [r for r in caplog.records if f"job:{held}" in r.getMessage()]
    assert len(logged) == 1  # once, not once a pass

    attempt = JobAttempt.objects.get(job_id=fine)
    assert attempt.state == AttemptState.SUBMITTED
    assert slurm_jobs_tagged(attempt.tag) == [attempt.backend_id]
    ended = drive(fine)
    assert ended.state == "SUCCEEDED", (ended.state_reason, ended.attempts.get().reason)
    assert _failure(fine) is None

    # put right: the held job goes through on the next pass and its failure is cleared
    counted = PassCounter.objects.get(pass_name="dispatch").failures
    assert counted >= 2  # (the control passes driving globex's job met it again)
    PosixGroup.objects.filter(project=acme.project).delete()
    assert drive(held).state == "SUCCEEDED"
    assert _failure(held) is None
    assert PassCounter.objects.get(pass_name="dispatch").failures == counted  # a counter stays


def test_a_cancelled_held_job_clears_its_failure(acme, slurm_cluster):
    group_ensure(tenant=acme.tenant)
    PosixGroup.objects.create(
        kind=GroupKind.PROJECT,
        tenant=acme.tenant,
        project=acme.project,
        name=f"p-gone{uuid.uuid4().hex[:8]}",
        gid=_allocate("gid"),
    )
    held = _job(acme)
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    assert _failure(held) is not None
    response = acme.client(Role.ADMIN).post(f"/api/v1/jobs/{held}/cancel/")
    assert response.status_code in (200, 202), response.content
    dispatch.PASS.open(fresh=True)
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    assert Job.objects.get(pk=held).state == "CANCELLED"
    assert _failure(held) is None


def test_an_orphaned_group_row_does_not_wedge_the_cluster(acme, globex, slurm_cluster):
    """The reported wedge: the project's group row left without its project, holding the name
    the project's group wants. Whatever group_ensure makes of it (apps/identity retires such a
    row), no tenant's job waits for ever: another tenant's job runs at once, and the project's
    own either runs or is held with the reason, never left in SUBMITTING."""
    group = group_ensure(tenant=acme.tenant, project=acme.project)
    with connection.cursor() as cursor:  # detached by hand, as the old cascade left it
        cursor.execute("UPDATE identity_posixgroup SET project_id = NULL WHERE id = %s", [group.pk])
    assert group.name == group_name(tenant=acme.tenant, project=acme.project)
    mine, theirs = _job(acme), _job(globex)
    dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
    assert JobAttempt.objects.get(job_id=theirs).state == AttemptState.SUBMITTED
    attempt = JobAttempt.objects.get(job_id=mine)
    if attempt.state == AttemptState.QUEUED:  # held: the user reads why
        job = Job.objects.get(pk=mine)
        assert job.state_reason.startswith("could not prepare its identity: ")
        assert _failure(mine).count == 1
    else:
        assert attempt.state == AttemptState.SUBMITTED
    ended = drive(theirs)
    assert ended.state == "SUCCEEDED", (ended.state_reason, ended.attempts.get().reason)


def test_an_older_projects_directory_holds_the_new_projects_job(acme, globex, slurm_cluster):
    """A directory left at the project's path with another group (an older project's, not
    purged): the job is held with the reason, never given the old files; others run."""
    tenant_gid = group_ensure(tenant=acme.tenant).gid
    old_gid = _allocate("gid")  # a group no row of this project holds
    path = project_root(acme.project)
    privileged.directories_make(
        dirs=[
            privileged.Directory(str(path.parent.parent), 0, 0, 0o755),
            privileged.Directory(str(path.parent), 0, tenant_gid, 0o2750, platform_acl=True),
            privileged.Directory(str(path), 0, old_gid, 0o2770),
        ]
    )
    try:
        held, fine = _job(acme), _job(globex)
        dispatch.dispatch_cluster(cluster_id=slurm_cluster.pk)
        job = Job.objects.get(pk=held)
        assert job.state == "QUEUED", job.state_reason
        assert job.state_reason.startswith("could not prepare its directory: an older project's")
        assert _failure(held) is not None
        assert os.lstat(path).st_gid == old_gid  # not taken over
        assert drive(fine).state == "SUCCEEDED"
    finally:
        privileged.tree_remove(path=str(path))
