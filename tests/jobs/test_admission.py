"""Admission under quotas: readable reasons, queue positions, fairness, priority, atomicity."""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from apps.jobs.admission import admit_tenant, fair_order
from apps.jobs.models import Job
from apps.jobs.services import job_cancel
from apps.jobs.states import ACTIVE
from apps.quotas.models import Quota, UsageRecord
from apps.tenancy.access import actor_for_user
from apps.tenancy.models import Role
from tests.factories import ProjectFactory, ProjectMemberFactory, make_job

pytestmark = pytest.mark.django_db


def post(world, role, project, gpus=1, **extra):
    body = {
        "project": str(project.id),
        "name": "j",
        "command": ["true"],
        "resources": {"gpus_per_node": gpus},
        **extra,
    }
    response = world.client(role).post(reverse("job-list"), body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_a_job_over_the_project_quota_waits_with_a_readable_reason(acme, cluster):
    acme.project.slug = "vision"
    acme.project.save()
    Quota.objects.create(tenant=acme.tenant, project=acme.project, gpus=8)
    first = post(acme, Role.MEMBER, acme.project, gpus=4)
    second = post(acme, Role.MEMBER, acme.project, gpus=4)
    third = post(acme, Role.MEMBER, acme.project, gpus=2)
    assert [first["state"], second["state"]] == ["QUEUED", "QUEUED"]
    assert third["state"] == "PENDING"
    assert third["state_reason"] == "project vision: 8 of 8 GPUs in use (this job needs 2)"
    assert third["queue_position"] == 1
    job_cancel(
        actor=actor_for_user(user=acme.users[Role.MEMBER]), job=Job.objects.get(pk=first["id"])
    )
    admit_tenant(tenant_id=acme.tenant.id)
    third_now = Job.objects.get(pk=third["id"])
    assert third_now.state == "QUEUED" and third_now.queue_position is None


def test_tenant_user_and_running_job_limits(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, cpus=3)
    Quota.objects.create(tenant=acme.tenant, user=acme.users[Role.MEMBER], running_jobs=1)
    a = post(acme, Role.MEMBER, acme.project, gpus=0)
    b = post(acme, Role.MEMBER, acme.project, gpus=0)
    assert (a["state"], b["state"]) == ("QUEUED", "PENDING")
    assert b["state_reason"] == "user acme-member: 1 of 1 jobs running"
    c = post(
        acme, Role.ADMIN, acme.project, gpus=0, resources={"gpus_per_node": 0, "cpus_per_task": 3}
    )
    assert c["state"] == "PENDING"
    assert c["state_reason"] == "tenant acme: 1 of 3 CPUs in use (this job needs 3)"


def test_monthly_gpu_hours(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpu_hours_per_month=1)
    done = make_job(project=acme.project, user=acme.users[Role.MEMBER], state="SUCCEEDED")
    attempt = done.attempts.create(number=1, state="SUCCEEDED")
    now = timezone.now()
    UsageRecord.objects.create(
        tenant=acme.tenant,
        project=acme.project,
        job=done,
        user=acme.users[Role.MEMBER],
        attempt=attempt,
        started_at=now - timedelta(hours=1),
        ended_at=now,
        gpus=1,
        gpu_seconds=3600,
    )
    waiting = post(acme, Role.MEMBER, acme.project, gpus=1)
    assert waiting["state"] == "PENDING"
    assert waiting["state_reason"] == "tenant acme: 1.0 of 1 GPU-hours used this month"
    assert post(acme, Role.MEMBER, acme.project, gpus=0)["state"] == "QUEUED"


def test_fair_order_prefers_the_project_with_least_recent_usage_then_priority(acme):
    busy, idle = acme.project, ProjectFactory(tenant=acme.tenant)
    user = acme.users[Role.ADMIN]
    jobs = [make_job(project=busy, user=user, name=f"b{i}") for i in range(3)]
    jobs += [make_job(project=idle, user=user, name=f"i{i}") for i in range(2)]
    urgent = make_job(project=busy, user=user, name="urgent", priority=50)
    order = fair_order([*jobs, urgent], recent_usage={busy.id: 1000.0})
    assert [j.name for j in order] == ["i0", "urgent", "i1", "b0", "b1", "b2"]


def test_waiting_jobs_get_positions_in_fair_order(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpus=1)
    other = ProjectFactory(tenant=acme.tenant)
    ProjectMemberFactory(project=other, user=acme.users[Role.MEMBER])
    post(acme, Role.MEMBER, acme.project)
    waiting = [post(acme, Role.MEMBER, p) for p in (acme.project, acme.project, other)]
    positions = {Job.objects.get(pk=j["id"]).project_id: [] for j in waiting}
    for j in waiting:
        job = Job.objects.get(pk=j["id"])
        positions[job.project_id].append(job.queue_position)
    assert sorted(p for ps in positions.values() for p in ps) == [1, 2, 3]


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_submissions_never_exceed_the_quota(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, project=acme.project, gpus=8)
    barrier = threading.Barrier(10)

    def submit(i):
        if i < 10:
            barrier.wait()
        try:
            return post(acme, Role.MEMBER, acme.project, gpus=1 + i % 3)["state"]
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=10) as pool:
        states = list(pool.map(submit, range(50)))
    assert len(states) == 50 and "QUEUED" in states and "PENDING" in states
    active = Job.objects.filter(project=acme.project, state__in=list(ACTIVE))
    assert sum(job.gpus for job in active) <= 8
    # and the queue is consistent: every waiting job has a distinct position
    positions = list(Job.objects.filter(state="PENDING").values_list("queue_position", flat=True))
    assert None not in positions
    assert sorted(positions) == list(range(1, len(positions) + 1))


def test_raising_a_quota_over_the_api_admits_what_now_fits(acme, cluster):
    """Quotas call admission through the hook the jobs app registers (quotas never import jobs)."""
    quota = Quota.objects.create(tenant=acme.tenant, project=acme.project, gpus=4)
    post(acme, Role.MEMBER, acme.project, gpus=4)
    waiting = post(acme, Role.MEMBER, acme.project, gpus=4)
    assert waiting["state"] == "PENDING"
    url = reverse("quota-detail", kwargs={"pk": quota.pk})
    response = acme.client(Role.ADMIN).patch(url, {"gpus": 8}, format="json")
    assert response.status_code == 200, response.content
    assert Job.objects.get(pk=waiting["id"]).state == "QUEUED"
