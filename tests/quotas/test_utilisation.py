"""GET /api/v1/usage/history/: GPU-hours and GPUs allocated over time from the usage ledger,
spread over the buckets each attempt ran in; only the caller's tenants; bad input is a 400
naming the field."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.jobs.models import JobAttempt
from apps.quotas.models import UsageRecord
from apps.tenancy.models import Role
from tests.factories import ProjectFactory, make_job

pytestmark = pytest.mark.django_db
DAY1 = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday


def used(
    world, *, start, hours: float, gpus: int, project=None, role=Role.MEMBER, gpu_seconds=None
):
    """An ended attempt's ledger row, as the reconciler writes it."""
    project = project or world.project
    job = make_job(project=project, user=world.users[role], state="SUCCEEDED")
    attempt = JobAttempt.objects.create(job=job, number=1, state="SUCCEEDED")
    return UsageRecord.objects.create(
        tenant=world.tenant,
        project=project,
        user=world.users[role],
        job=job,
        attempt=attempt,
        started_at=start,
        ended_at=start + timedelta(hours=hours),
        gpus=gpus,
        gpu_seconds=gpus * hours * 3600 if gpu_seconds is None else gpu_seconds,
    )


def history(client, **params) -> dict:
    response = client.get(reverse("usage-history"), params)
    assert response.status_code == 200, response.content
    return response.json()


def points(series: dict) -> list[tuple]:
    return [(p["start"][:13], p["gpu_hours"], p["gpus"]) for p in series["points"]]


def test_an_attempt_is_spread_over_the_buckets_it_ran_in(acme, globex):
    used(acme, start=DAY1 + timedelta(hours=12), hours=24, gpus=2)  # half of day 1, half of 2
    # a record that ends where it starts (clocks): its GPU-seconds count in its end's bucket
    used(acme, start=DAY1 + timedelta(days=3, hours=6), hours=0, gpus=1, gpu_seconds=3600)
    other = ProjectFactory(tenant=acme.tenant, slug="speech")
    used(acme, start=DAY1 + timedelta(days=1), hours=6, gpus=4, project=other)
    used(globex, start=DAY1, hours=48, gpus=8)  # another tenant's: never counted here

    body = history(
        acme.client(Role.VIEWER),
        since=DAY1.isoformat(),
        until=(DAY1 + timedelta(days=4)).isoformat(),
        tenant=str(acme.tenant.id),
    )
    assert (body["bucket"], body["group_by"]) == ("day", "project")
    by_project = {s["project"]: s for s in body["series"]}
    assert set(by_project) == {"acme-proj", "speech"}
    assert all(s["tenant"] == "acme" for s in body["series"])
    assert points(by_project["acme-proj"]) == [
        ("2026-11-02T00", 24.0, 1.0),  # 12 h of 2 GPUs: one GPU on average over the day
        ("2026-11-03T00", 24.0, 1.0),
        ("2026-11-04T00", 0.0, 0.0),  # every bucket, zeros included
        ("2026-11-05T00", 1.0, round(1 / 24, 4)),
    ]
    assert points(by_project["speech"])[1] == ("2026-11-03T00", 24.0, 1.0)
    # the ledger's total is kept, whatever the buckets
    weekly = history(
        acme.client(Role.VIEWER),
        since=DAY1.isoformat(),
        until=(DAY1 + timedelta(days=7)).isoformat(),
        bucket="week",
        group_by="tenant",
    )
    assert [(s["tenant"], points(s)) for s in weekly["series"]] == [
        ("acme", [("2026-11-02T00", 73.0, round(73 / 168, 4))])
    ]
    assert (
        history(
            globex.client(Role.VIEWER),
            since=DAY1.isoformat(),
            tenant=str(acme.tenant.id),
            until=(DAY1 + timedelta(days=4)).isoformat(),
        )["series"]
        == []
    )


def test_hours_per_user_and_one_project(acme):
    start = DAY1 + timedelta(hours=1, minutes=30)
    used(acme, start=start, hours=1, gpus=1)  # 30 minutes in each of two hours
    used(
        acme,
        start=start,
        hours=1,
        gpus=2,
        role=Role.ADMIN,
        project=ProjectFactory(tenant=acme.tenant, slug="speech"),
    )
    body = history(
        acme.client(Role.MEMBER),
        since=DAY1.isoformat(),
        until=(DAY1 + timedelta(hours=4)).isoformat(),
        bucket="hour",
        group_by="user",
    )
    rows = {s["user"]: [p["gpu_hours"] for p in s["points"]] for s in body["series"]}
    assert rows == {"acme-admin": [0, 1.0, 1.0, 0], "acme-member": [0, 0.5, 0.5, 0]}
    only = history(
        acme.client(Role.MEMBER),
        since=DAY1.isoformat(),
        until=(DAY1 + timedelta(hours=4)).isoformat(),
        bucket="hour",
        group_by="user",
        project=str(acme.project.id),
    )
    assert [s["user"] for s in only["series"]] == ["acme-member"]


def test_a_running_attempt_counts_from_its_start_until_now(acme, globex):
    now = datetime.now(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0)
    for world, gpus in ((acme, 4), (globex, 8)):  # globex's: never counted here
        job = make_job(
            project=world.project,
            user=world.users[Role.MEMBER],
            state="RUNNING",
            gpus_per_node=gpus,
        )
        JobAttempt.objects.create(
            job=job, number=1, state="RUNNING", started_at=hour - timedelta(hours=2)
        )
    body = history(
        acme.client(Role.VIEWER),
        since=(hour - timedelta(hours=3)).isoformat(),
        until=(hour + timedelta(hours=1)).isoformat(),
        bucket="hour",
    )
    (series,) = body["series"]
    gpus = [p["gpus"] for p in series["points"]]
    assert gpus[:3] == [0.0, 4.0, 4.0]  # before it, then its two whole hours
    assert 0 < gpus[3] <= 4.0 * (now - hour).total_seconds() / 3600 + 0.01  # this hour so far


def test_two_queries_whatever_the_ledger_and_the_running_hold(acme):
    client = acme.client(Role.VIEWER)
    params = {"since": DAY1.isoformat(), "until": (DAY1 + timedelta(days=10)).isoformat()}

    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            history(client, **params)
        return len(captured)

    used(acme, start=DAY1, hours=5, gpus=1)
    count()
    baseline = count()
    for i in range(20):
        used(acme, start=DAY1 + timedelta(hours=7 * i), hours=3, gpus=1 + i % 3)
        job = make_job(project=acme.project, user=acme.users[Role.MEMBER], state="RUNNING")
        JobAttempt.objects.create(job=job, number=1, state="RUNNING", started_at=DAY1)
    assert count() == baseline


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"bucket": "minute"}, "bucket"),
        ({"group_by": "job"}, "group_by"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-11-05T00:00:00Z", "until": "2026-11-01T00:00:00Z"}, "since"),
        (
            {"since": "2020-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z", "bucket": "hour"},
            "bucket",
        ),
        ({"tenant": "acme"}, "tenant"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(acme, params, field):
    response = acme.client(Role.VIEWER).get(reverse("usage-history"), params)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]


def test_defaults_are_the_last_30_days_by_day(acme):
    body = history(acme.client(Role.VIEWER))
    assert (body["bucket"], body["group_by"], body["series"]) == ("day", "project", [])
    since = datetime.fromisoformat(body["since"])
    until = datetime.fromisoformat(body["until"])
    assert until - since == timedelta(days=30)
