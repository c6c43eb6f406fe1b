"""What the jobs list gives the UI: failure signatures as tags, at a constant query cost."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.jobs.models import JobAttempt
from apps.logs.models import FailureSignature, SignatureMatch
from apps.tenancy.models import Role
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def failed(world, cluster, name: str, *signatures: FailureSignature, attempts: int = 1):
    """A failed job whose attempts each matched the given signatures (rows, as the scanner
    in apps/logs/signatures.py writes them)."""
    job = make_job(
        project=world.project, user=world.users[Role.MEMBER], state="FAILED", cluster=cluster
    )
    job.name = name
    job.save(update_fields=["name"])
    for number in range(1, attempts + 1):
        attempt = JobAttempt.objects.create(job=job, number=number, state="FAILED")
        for signature in signatures:
            SignatureMatch.objects.create(signature=signature, job=job, attempt=attempt, lines=2)
    return job


def listing(client, **params) -> dict:
    response = client.get(reverse("job-list"), params)
    assert response.status_code == 200, response.content
    return {row["name"]: row for row in response.json()["results"]}


def test_the_list_tags_each_job_with_its_signatures(acme, globex, cluster):
    oom = FailureSignature.objects.create(tenant=acme.tenant, name="oom", query="CUDA")
    nccl = FailureSignature.objects.create(tenant=acme.tenant, name="nccl", query="NCCL")
    failed(acme, cluster, "both", oom, nccl, attempts=2)  # matched twice: named once
    failed(acme, cluster, "one", nccl)
    failed(acme, cluster, "none")
    theirs = FailureSignature.objects.create(tenant=globex.tenant, name="disk", query="ENOSPC")
    failed(globex, cluster, "elsewhere", theirs)

    rows = listing(acme.client(Role.VIEWER))
    assert {name: row["signatures"] for name, row in rows.items()} == {
        "both": ["nccl", "oom"],  # sorted, distinct
        "one": ["nccl"],
        "none": [],
    }
    assert listing(globex.client(Role.VIEWER))["elsewhere"]["signatures"] == ["disk"]
    # the tag filter and the tags agree
    assert set(listing(acme.client(Role.VIEWER), signature="oom")) == {"both"}


def test_a_page_costs_the_same_queries_however_many_jobs_and_tags(acme, cluster):
    client = acme.client(Role.VIEWER)
    signatures = [
        FailureSignature.objects.create(tenant=acme.tenant, name=f"sig-{i}", query=f"q{i}")
        for i in range(3)
    ]

    def queries(page_size: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(reverse("job-list"), {"page_size": page_size})
        assert response.status_code == 200
        return len(captured)

    failed(acme, cluster, "first", signatures[0])
    queries(10)  # the first request also reads what the actor's cache then holds
    baseline = queries(10)
    for i in range(12):
        failed(acme, cluster, f"job-{i}", *signatures[: i % 4], attempts=1 + i % 2)
    assert queries(10) == baseline
    assert queries(100) == baseline
    rows = listing(client, page_size=100)
    assert len(rows) == 13 and rows["job-3"]["signatures"] == ["sig-0", "sig-1", "sig-2"]


def test_a_submitted_job_answers_with_no_signatures(acme, cluster):
    client = acme.client(Role.MEMBER)
    spec = {"project": str(acme.project.id), "name": "fresh", "command": ["true"]}
    response = client.post(reverse("job-list"), spec, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["signatures"] == []
    batch = client.post(reverse("job-batch"), {"jobs": [spec, {**spec, "name": "two"}]}, "json")
    assert batch.status_code == 201, batch.content
    assert [row["signatures"] for row in batch.json()["results"]] == [[], []]
