"""Borrowing (apps/jobs/borrowing.py): with Cluster.config quota_borrowing, a job held only by
its tenant's GPU quota runs on the cluster's idle GPUs; never past other limits, never more
than what is idle across all tenants, and not while a starving job of the tenant waits."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.admission import admit_tenant
from apps.jobs.models import Job
from apps.jobs.priority import STARVING_SECONDS
from apps.quotas.models import Quota
from apps.tenancy.models import Role
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def job(world, cluster, name, gpus, *, state="PENDING", minutes=10):
    return make_job(
        project=world.project,
        user=world.users[Role.MEMBER],
        name=name,
        state=state,
        cluster=cluster,
        resources={"gpus_per_node": gpus, "time_limit": minutes},
    )


def borrowing(cluster, on=True):
    cluster.config = {**cluster.config, "quota_borrowing": on}
    cluster.save(update_fields=["config"])


def admitted_names(world):
    return [j.name for j in admit_tenant(tenant_id=world.tenant.id)]


def test_a_job_over_the_tenant_quota_borrows_idle_gpus_only_where_enabled(acme, cluster):
    # the test cluster: 2 nodes x 4 GPUs
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    job(acme, cluster, "running", 4, state="RUNNING")
    waiting = job(acme, cluster, "extra", 2)
    assert admitted_names(acme) == []
    waiting.refresh_from_db()
    assert waiting.state_reason == "tenant acme: 4 of 4 GPUs in use (this job needs 2)"
    borrowing(cluster)
    assert admitted_names(acme) == ["extra"]


def test_borrowing_takes_no_more_than_what_all_tenants_leave_idle(acme, globex, cluster):
    borrowing(cluster)
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    job(acme, cluster, "running", 4, state="RUNNING")
    job(globex, cluster, "other-tenant", 3, state="QUEUED")
    first, second = job(acme, cluster, "one", 1), job(acme, cluster, "two", 1)
    assert admitted_names(acme) == ["one"]  # 8 - 4 - 3 = 1 idle
    second.refresh_from_db()
    assert (second.state, second.queue_position) == ("PENDING", 1)
    assert Job.objects.get(pk=first.pk).state == "QUEUED"


def test_other_limits_are_never_borrowed_past(acme, cluster):
    borrowing(cluster)
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    Quota.objects.create(tenant=acme.tenant, project=acme.project, gpus=4)
    job(acme, cluster, "running", 4, state="RUNNING")
    job(acme, cluster, "extra", 1)
    assert admitted_names(acme) == []  # the project's quota is full too


def test_a_starving_job_stops_its_tenant_from_borrowing(acme, globex, cluster):
    borrowing(cluster)
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    job(acme, cluster, "running", 3, state="RUNNING")
    job(globex, cluster, "other-tenant", 2, state="RUNNING")  # 3 idle
    big = job(acme, cluster, "big", 4)
    job(acme, cluster, "small", 1)
    # the big one cannot borrow (3 idle), the small one borrows past it
    assert admitted_names(acme) == ["small"]
    Job.objects.filter(name="small").update(state="SUCCEEDED")
    Job.objects.filter(pk=big.pk).update(
        created_at=timezone.now() - timedelta(seconds=STARVING_SECONDS + 1)
    )
    job(acme, cluster, "small-2", 1)
    assert admitted_names(acme) == []
    # the tenant's running job ends: the starving job fits its own quota and goes first
    Job.objects.filter(name="running").update(state="SUCCEEDED")
    assert admitted_names(acme) == ["big", "small-2"]
