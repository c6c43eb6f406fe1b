"""A cluster that enforces the tenant GPU quota itself (config tenant_gpu_quota = "slurm"):
admission does not hold jobs for that limit, the platform keeps the tenant's Slurm account at
GrpTRES=gres/gpu=<quota> (with quota_borrowing, plus the idle GPUs it lends), and every other
limit stays the platform's."""

import pytest
from django.urls import reverse

from apps.compute.backends import for_cluster
from apps.jobs import cluster_limits
from apps.jobs.borrowing import cluster_gpus
from apps.quotas.models import Quota
from apps.tenancy.models import Role
from tests.conftest import make_world
from tests.factories import make_job
from tests.jobs.conftest import drive, slurm, submit, tenant_quota_in_use

pytestmark = pytest.mark.django_db


def post(world, gpus: int) -> dict:
    body = {
        "project": str(world.project.id),
        "name": "j",
        "command": ["true"],
        "resources": {"gpus_per_node": gpus},
    }
    response = world.client(Role.MEMBER).post(reverse("job-list"), body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_the_tenant_gpu_quota_is_left_to_a_cluster_that_enforces_it(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    cluster.config = {**cluster.config, "tenant_gpu_quota": "slurm"}
    cluster.save()
    states = [post(acme, 2)["state"] for _ in range(3)]
    assert states == ["QUEUED", "QUEUED", "QUEUED"]  # Slurm, not the platform, holds the third


def test_other_limits_stay_with_the_platform_on_such_a_cluster(acme, cluster):
    cluster.config = {**cluster.config, "tenant_gpu_quota": "slurm"}
    cluster.save()
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    Quota.objects.create(tenant=acme.tenant, project=acme.project, gpus=2)
    first, second = post(acme, 2), post(acme, 2)
    assert (first["state"], second["state"]) == ("QUEUED", "PENDING")
    assert second["state_reason"].startswith(f"project {acme.project.slug}: 2 of 2 GPUs in use")


def test_without_the_setting_the_platform_holds_the_tenant_gpu_quota(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    states = [post(acme, 2)["state"] for _ in range(3)]
    assert states == ["QUEUED", "QUEUED", "PENDING"]


def grp_tres(account: str) -> str:
    out = slurm(
        "sacctmgr", "-n", "-P", "show", "assoc", f"account={account}", "format=user,grptres"
    )
    rows = [line.split("|") for line in out.splitlines()]
    return next(grp for user, grp in rows if user == "")  # the account's own association


def test_the_dispatcher_keeps_the_tenant_account_at_the_quota(slurm_cluster):
    world = make_world("gpulimit")
    account = f"t-{world.tenant.slug}"  # the tenant's (its worker's suffix under xdist)
    slurm("sacctmgr", "-i", "add", "account", account, "parent=root", check=False)
    slurm_cluster.config = {**slurm_cluster.config, "tenant_gpu_quota": "slurm"}
    slurm_cluster.save()
    backend = for_cluster(slurm_cluster)
    cluster_limits.forget(cluster=slurm_cluster, tenant_ids=[world.tenant.pk])

    def sync(**kwargs):
        cluster_limits.sync(
            cluster=slurm_cluster, backend=backend, tenants=[world.tenant], **kwargs
        )

    try:
        quota = Quota.objects.create(tenant=world.tenant, gpus=6)
        sync(only_unset=True)  # the dispatcher's call, before the tenant's first submission
        assert grp_tres(account) == "gres/gpu=6"
        quota.gpus = 3
        quota.save()
        sync(only_unset=True)  # set once: the reconciler's passes keep it current
        assert grp_tres(account) == "gres/gpu=6"
        sync()
        assert grp_tres(account) == "gres/gpu=3"
        quota.delete()
        sync()
        assert grp_tres(account) == ""
    finally:
        slurm("sacctmgr", "-i", "delete", "account", account, check=False)


def test_lent_limits_split_the_spare_gpus_by_quota_and_never_past_a_need():
    quotas = {"a": 128, "b": 102, "c": 77, "d": None}
    # alone past its quota: every idle GPU, as far as it waits for them
    assert cluster_limits.lent_limits(
        capacity=256, quotas=quotas, running={"a": 100}, waiting={"a": 500}
    ) == {"a": 256, "b": 102, "c": 77, "d": None}
    assert (
        cluster_limits.lent_limits(
            capacity=256, quotas=quotas, running={"a": 100}, waiting={"a": 40}
        )["a"]
        == 140
    )
    # c's and d's waiting jobs keep their room; a and b split the rest 128:102
    limits = cluster_limits.lent_limits(
        capacity=256,
        quotas=quotas,
        running={"a": 100, "b": 50},
        waiting={"a": 500, "b": 300, "c": 8, "d": 10},
    )
    assert limits == {"a": 128 + 5, "b": 102 + 3, "c": 77, "d": None}
    # past its quota with nothing idle: held where it is, no new start
    assert cluster_limits.lent_limits(
        capacity=256, quotas=quotas, running={"a": 200, "b": 56}, waiting={"a": 10, "b": 60}
    ) == {"a": 200, "b": 102, "c": 77, "d": None}


def test_a_busy_tenant_is_lent_what_the_others_leave_idle_and_gives_it_back(slurm_cluster):
    busy, other = make_world("lendbusy"), make_world("lendother")
    accounts = {f"t-{w.tenant.slug}": w for w in (busy, other)}
    busy_account, other_account = accounts
    for account in accounts:
        slurm("sacctmgr", "-i", "add", "account", account, "parent=root", check=False)
    slurm_cluster.config = {
        **slurm_cluster.config,
        "tenant_gpu_quota": "slurm",
        "quota_borrowing": True,
    }
    slurm_cluster.save()
    backend = for_cluster(slurm_cluster)
    capacity = cluster_gpus(cluster_id=slurm_cluster.pk)
    assert capacity >= 6, "the local cluster has too few GPUs for this test"
    cluster_limits.forget(
        cluster=slurm_cluster, tenant_ids=[w.tenant.pk for w in accounts.values()]
    )

    def job(world, gpus, state):
        return make_job(
            project=world.project,
            user=world.users[Role.MEMBER],
            state=state,
            cluster=slurm_cluster,
            gpus_per_node=gpus,
        )

    def sync():  # the reconciler's call after every pass
        return cluster_limits.sync(cluster=slurm_cluster, backend=backend)

    try:
        Quota.objects.create(tenant=busy.tenant, gpus=2)
        Quota.objects.create(tenant=other.tenant, gpus=capacity - 2)
        job(busy, 2, "RUNNING")
        waiting = job(busy, 3, "SUBMITTED")  # past its quota, with the cluster idle
        sync()
        assert grp_tres(busy_account) == "gres/gpu=5"
        assert grp_tres(other_account) == ""  # no work there: not touched
        others = job(other, capacity - 2, "SUBMITTED")  # its quota's worth: nothing spare
        sync()
        assert grp_tres(busy_account) == "gres/gpu=2"
        assert grp_tres(other_account) == f"gres/gpu={capacity - 2}"
        others.state = waiting.state = "SUCCEEDED"
        others.save()
        waiting.save()
        assert sync() == {}  # nothing lent, nothing changed
        assert grp_tres(busy_account) == "gres/gpu=2"
    finally:
        for account in accounts:
            slurm("sacctmgr", "-i", "delete", "account", account, check=False)


def test_slurm_holds_the_tenant_at_its_quota_until_room_frees(acme, slurm_cluster):
    """Both jobs pass admission; Slurm runs the first, keeps the second waiting on the
    tenant's limit (the job says so) and starts it when the first ends."""
    client = acme.client(Role.MEMBER)
    with tenant_quota_in_use(acme, slurm_cluster) as first:
        second = submit(client, acme.project, command=["true"], resources={"gpus_per_node": 1})
        waiting = drive(second["id"], condition=lambda j: "AssocGrpGRES" in j.state_reason)
        assert waiting.state == "SUBMITTED"
        assert waiting.state_reason.startswith("waiting in Slurm: the tenant's GPU quota is in use")
        response = client.post(reverse("job-cancel", kwargs={"pk": first}))
        assert response.status_code == 200
        assert drive(second["id"]).state == "SUCCEEDED"
