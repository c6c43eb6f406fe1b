"""Admission's order (apps/jobs/priority.py): least expected GPU-time first within a project,
aging so that a long job is not passed for ever, a starving job holding its room in the quota,
explicit priority and the fair order between projects kept."""

import math
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.admission import admit_tenant, fair_order
from apps.jobs.models import Job
from apps.jobs.priority import AGING_SECONDS, STARVING_SECONDS, expected_gpu_seconds, rank
from apps.quotas.models import Quota
from apps.tenancy.models import Role
from tests.factories import ProjectFactory, make_job

pytestmark = pytest.mark.django_db


def job(world, name, gpus, minutes, *, project=None, state="PENDING", cluster=None, **extra):
    return make_job(
        project=project or world.project,
        user=world.users[Role.MEMBER],
        name=name,
        state=state,
        cluster=cluster,
        resources={"gpus_per_node": gpus, "time_limit": minutes},
        **extra,
    )


def age(j, seconds):
    Job.objects.filter(pk=j.pk).update(created_at=timezone.now() - timedelta(seconds=seconds))
    j.refresh_from_db()
    return j


def states(*jobs):
    return [Job.objects.get(pk=j.pk).state for j in jobs]


def test_expected_gpu_time_is_gpus_times_the_time_limit(acme):
    assert expected_gpu_seconds(job(acme, "a", 4, 90)) == 4 * 90 * 60
    assert expected_gpu_seconds(job(acme, "cpu", 0, 10)) == 600  # counts as one GPU


def test_the_least_expected_gpu_time_is_admitted_first(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    big = job(acme, "big", 4, 600, cluster=cluster)  # submitted first
    medium = job(acme, "medium", 2, 60, cluster=cluster)
    small = job(acme, "small", 1, 10, cluster=cluster)
    admitted = admit_tenant(tenant_id=acme.tenant.id)
    # in submission order the big one would have taken the whole quota
    assert [j.name for j in admitted] == ["small", "medium"]
    assert states(big, medium, small) == ["PENDING", "QUEUED", "QUEUED"]
    big.refresh_from_db()
    assert big.queue_position == 1
    assert big.state_reason == "tenant acme: 3 of 4 GPUs in use (this job needs 4)"


def test_aging_puts_a_long_waiting_big_job_ahead_of_a_new_small_one(acme):
    big = job(acme, "big", 4, 10)
    small = job(acme, "small", 1, 1)
    assert [j.name for j in fair_order([big, small], {})] == ["small", "big"]
    # the bound in priority.py: AGING_SECONDS per halving of the size ratio
    bound = AGING_SECONDS * math.log2(expected_gpu_seconds(big) / expected_gpu_seconds(small))
    assert bound + 60 < STARVING_SECONDS  # rank alone decides below
    age(big, bound - 60)
    assert [j.name for j in fair_order([big, small], {})] == ["small", "big"]
    age(big, bound + 60)
    assert rank(big, now=timezone.now()) < rank(small, now=timezone.now())
    assert [j.name for j in fair_order([big, small], {})] == ["big", "small"]


def test_a_starving_job_goes_first_whatever_its_size(acme):
    huge = job(acme, "huge", 8, 7 * 24 * 60)
    small = job(acme, "small", 1, 1)
    age(huge, STARVING_SECONDS - 60)
    assert [j.name for j in fair_order([huge, small], {})] == ["small", "huge"]
    age(huge, STARVING_SECONDS + 1)
    assert [j.name for j in fair_order([huge, small], {})] == ["huge", "small"]


def test_a_starving_job_holds_its_room_so_small_jobs_stop_passing_it(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    running = job(acme, "running", 2, 60, state="QUEUED", cluster=cluster)
    big = job(acme, "big", 4, 600, cluster=cluster)
    first = job(acme, "first-small", 1, 10, cluster=cluster)
    # not starving yet: the small job fits beside the running one and passes the big one
    assert [j.name for j in admit_tenant(tenant_id=acme.tenant.id)] == ["first-small"]
    Job.objects.filter(pk=first.pk).update(state="SUCCEEDED")
    age(big, STARVING_SECONDS + 1)
    small = job(acme, "small", 1, 10, cluster=cluster)
    assert admit_tenant(tenant_id=acme.tenant.id) == []
    assert states(big, small) == ["PENDING", "PENDING"]
    # the running job ends: the big job, not the small one, gets the quota
    Job.objects.filter(pk=running.pk).update(state="SUCCEEDED")
    assert [j.name for j in admit_tenant(tenant_id=acme.tenant.id)] == ["big"]
    assert states(small) == ["PENDING"]


def test_a_job_bigger_than_the_quota_never_holds_room(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpus=4)
    too_big = age(job(acme, "too-big", 8, 60, cluster=cluster), STARVING_SECONDS + 1)
    job(acme, "small", 1, 10, cluster=cluster)
    assert [j.name for j in admit_tenant(tenant_id=acme.tenant.id)] == ["small"]
    assert states(too_big) == ["PENDING"]


def test_explicit_priority_comes_before_size(acme):
    small = job(acme, "small", 1, 1)
    urgent = job(acme, "urgent", 8, 600, priority=10)
    assert [j.name for j in fair_order([small, urgent], {})] == ["urgent", "small"]


def test_projects_still_take_turns_whatever_the_sizes(acme):
    busy, idle = acme.project, ProjectFactory(tenant=acme.tenant)
    smalls = [job(acme, f"s{i}", 1, 1, project=busy) for i in range(3)]
    bigs = [job(acme, f"b{i}", 8, 600 + i, project=idle) for i in range(2)]
    order = fair_order([*smalls, *bigs], {busy.id: 1000.0})
    # the project with the least recent use first, round-robin; size orders within a project
    assert [j.name for j in order] == ["b0", "s0", "b1", "s1", "s2"]
