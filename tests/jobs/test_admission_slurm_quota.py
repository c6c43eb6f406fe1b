"""A cluster that enforces the tenant GPU quota itself (config tenant_gpu_quota = "slurm"):
admission does not hold jobs for that limit, the dispatcher keeps the tenant's Slurm account at
GrpTRES=gres/gpu=<quota>, and every other limit stays the platform's."""

import pytest
from django.core.cache import cache
from django.urls import reverse

from apps.compute.backends import for_cluster
from apps.jobs.admission import tenant_gpu_limit_sync
from apps.quotas.models import Quota
from apps.tenancy.models import Role
from tests.conftest import make_world
from tests.jobs.conftest import slurm

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
    account = "t-gpulimit"
    slurm("sacctmgr", "-i", "add", "account", account, "parent=root", check=False)
    slurm_cluster.config = {**slurm_cluster.config, "tenant_gpu_quota": "slurm"}
    slurm_cluster.save()
    backend = for_cluster(slurm_cluster)
    cache.delete_many([f"torus:tenant-gpu-limit:{slurm_cluster.pk}:{world.tenant.pk}"])
    try:
        quota = Quota.objects.create(tenant=world.tenant, gpus=6)
        tenant_gpu_limit_sync(cluster=slurm_cluster, backend=backend, tenant=world.tenant)
        assert grp_tres(account) == "gres/gpu=6"
        quota.gpus = 3
        quota.save()
        tenant_gpu_limit_sync(cluster=slurm_cluster, backend=backend, tenant=world.tenant)
        assert grp_tres(account) == "gres/gpu=3"
        quota.delete()
        tenant_gpu_limit_sync(cluster=slurm_cluster, backend=backend, tenant=world.tenant)
        assert grp_tres(account) == ""
    finally:
        slurm("sacctmgr", "-i", "delete", "account", account, check=False)
