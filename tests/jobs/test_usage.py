"""The usage ledger through the API: per period, grouped, and as CSV; scoped per tenant."""

import csv
import io
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from apps.quotas.models import UsageRecord
from apps.tenancy.models import Role
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def record(world, *, gpus: int, seconds: float, when: datetime, role=Role.MEMBER):
    job = make_job(
        project=world.project, user=world.users[role], state="SUCCEEDED", gpus_per_node=gpus
    )
    attempt = job.attempts.create(number=1, state="SUCCEEDED")
    return UsageRecord.objects.create(
        tenant=world.tenant,
        project=world.project,
        user=world.users[role],
        job=job,
        attempt=attempt,
        started_at=when,
        ended_at=when,
        gpus=gpus,
        cpus=1,
        gpu_seconds=gpus * seconds,
        cpu_seconds=seconds,
    )


def test_usage_per_project_and_user_for_a_month(acme, globex):
    november = datetime(2026, 11, 5, tzinfo=UTC)
    record(acme, gpus=2, seconds=3600, when=november)
    record(acme, gpus=1, seconds=1800, when=november, role=Role.ADMIN)
    record(acme, gpus=4, seconds=3600, when=datetime(2026, 10, 5, tzinfo=UTC))
    record(globex, gpus=8, seconds=3600, when=november)
    client = acme.client(Role.VIEWER)
    rows = client.get(reverse("usage"), {"period": "2026-11"}).json()["results"]
    assert rows == [
        {
            "tenant": "acme",
            "project": "acme-proj",
            "period": "2026-11",
            "gpu_hours": 2.5,
            "cpu_hours": 1.5,
            "gpu_seconds": 9000.0,
            "cpu_seconds": 5400.0,
            "jobs": 2,
            "attempts": 2,
        }
    ]
    by_user = client.get(reverse("usage"), {"period": "2026-11", "group_by": "user"}).json()
    assert {(r["user"], r["gpu_hours"]) for r in by_user["results"]} == {
        ("acme-member", 2.0),
        ("acme-admin", 0.5),
    }


def test_usage_exports_csv(acme):
    record(acme, gpus=1, seconds=7200, when=datetime(2026, 11, 1, 12, tzinfo=UTC))
    response = acme.client(Role.VIEWER).get(reverse("usage-export"), {"period": "2026-11"})
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert rows[0]["project"] == "acme-proj" and float(rows[0]["gpu_hours"]) == 2.0


def test_bad_period_and_grouping_are_400s(acme):
    client = acme.client(Role.VIEWER)
    assert client.get(reverse("usage"), {"period": "November"}).status_code == 400
    response = client.get(reverse("usage"), {"group_by": "planet"})
    assert response.status_code == 400 and "group_by" in response.json()["error"]["fields"]
