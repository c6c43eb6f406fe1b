"""The size order passed on to the cluster's own queue (apps/jobs/priority.py cluster_nice):
what admission lets through waits in Slurm's queue, which runs the smallest expected GPU-time
first (a nice value per doubling), not in submission order, until a job starves."""

import math

import pytest

from apps.compute.models import Cluster
from apps.jobs.models import Job
from apps.jobs.priority import NICE_PER_DOUBLING, cluster_nice
from apps.jobs.reconcile import reconcile_cluster
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, slurm, submit, tenant_quota_in_use


def sized(gpus: int, minutes: int) -> Job:
    return Job(gpus=gpus, spec={"resources": {"time_limit": minutes}})


def test_nice_grows_by_a_step_per_doubling_of_the_expected_gpu_time():
    cluster = Cluster(name="c", config={})
    assert cluster_nice(job=sized(1, 1), cluster=cluster) == 0  # one GPU-minute: first
    assert cluster_nice(job=sized(0, 1), cluster=cluster) == 0  # no GPUs counts as one
    assert cluster_nice(job=sized(1, 2), cluster=cluster) == NICE_PER_DOUBLING
    assert cluster_nice(job=sized(8, 2), cluster=cluster) == 4 * NICE_PER_DOUBLING
    assert cluster_nice(job=sized(32, 2), cluster=cluster) == 6 * NICE_PER_DOUBLING
    assert cluster_nice(job=sized(2**70, 2**40), cluster=cluster) == 10_000  # bounded


def test_a_cluster_or_the_setting_changes_the_step_and_zero_turns_it_off(settings):
    big = sized(8, 2)
    assert cluster_nice(job=big, cluster=Cluster(name="c", config={"size_nice": 10})) == 40
    assert cluster_nice(job=big, cluster=Cluster(name="c", config={"size_nice": 0})) == 0
    settings.TORUS_SCHEDULING_NICE_PER_DOUBLING = 0
    assert cluster_nice(job=big, cluster=Cluster(name="c", config={})) == 0
    assert cluster_nice(job=big, cluster=Cluster(name="c", config={"size_nice": 5})) == 20


@pytest.mark.parametrize("through_sbatch", [False, True])
def test_slurm_ranks_a_later_small_job_before_an_earlier_big_one(
    acme, slurm_cluster, through_sbatch
):
    client = acme.client(Role.ADMIN)
    resources = {"gpus_per_node": 0, "time_limit": 600}
    big = submit(client, acme.project, command=["sleep", "60"], resources=resources)["id"]
    small = submit(
        client, acme.project, command=["sleep", "60"], resources={**resources, "time_limit": 1}
    )["id"]
    ids = {}
    for job_id in (big, small):
        if through_sbatch:  # an attempt with excluded nodes goes through sbatch, not slurmrestd
            Job.objects.get(pk=job_id).attempts.update(excluded_nodes=["n3"])
        job = drive(job_id, condition=lambda j: j.attempts.exclude(backend_id="").exists())
        ids[job_id] = job.attempts.get().backend_id
    # nice and priority as the controller holds them
    found = {
        line.split("|")[0]: (int(line.split("|")[1]), int(line.split("|")[2]))
        for line in slurm("squeue", "-h", "-a", "-t", "all", "-o", "%i|%y|%Q").splitlines()
    }
    expected_big = cluster_nice(job=Job.objects.get(pk=big), cluster=slurm_cluster)
    assert expected_big == round(NICE_PER_DOUBLING * 9.2288) > 0  # log2(600)
    assert found[ids[big]][0] == expected_big
    assert found[ids[small]][0] == 0
    assert found[ids[small]][1] > found[ids[big]][1]  # submitted later, ranked first


def test_a_starving_job_gets_its_submission_rank_back_in_slurms_queue(
    acme, slurm_cluster, settings
):
    """The size order holds a big job back in Slurm's queue for at most the starving time:
    the reconciler clears the nice of a starving job still waiting there, once."""
    client = acme.client(Role.MEMBER)
    with tenant_quota_in_use(acme, slurm_cluster):
        waiting = submit(
            client,
            acme.project,
            command=["true"],
            resources={"gpus_per_node": 1, "time_limit": 10},
        )["id"]
        job = drive(waiting, condition=lambda j: "AssocGrpGRES" in j.state_reason)
        backend_id = job.attempts.get().backend_id
        nice = cluster_nice(job=job, cluster=slurm_cluster)
        assert nice == round(NICE_PER_DOUBLING * math.log2(10)) > 0

        def nice_in_slurm() -> int:
            return int(slurm("squeue", "-h", "-j", backend_id, "-o", "%y").strip())

        assert nice_in_slurm() == nice  # waited under the starving time: left as it is
        settings.TORUS_SCHEDULING_STARVING_SECONDS = 0
        assert reconcile_cluster(cluster_id=slurm_cluster.pk)["unstarved"] == 1
        assert nice_in_slurm() == 0
        assert Job.objects.get(pk=waiting).state == "SUBMITTED"  # still waiting on the quota
        assert reconcile_cluster(cluster_id=slurm_cluster.pk)["unstarved"] == 0  # once
