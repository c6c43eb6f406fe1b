"""Submitting a job: the SQL statements it costs (baselines, so that they cannot grow back),
the answer it gives (equal to the serializers' for the same job read back), and the cached
placements and quota presence (apps/jobs/submit_cache.py) following every change."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.renderers import JSONRenderer

from apps.compute.models import Node, Partition
from apps.jobs.api.serializers import JobDetailSerializer, JobSerializer
from apps.jobs.models import Job, JobEvent
from apps.jobs.spec import JobSpecSerializer
from apps.logs.models import FailureSignature, SignatureMatch
from apps.quotas.models import Quota
from apps.tenancy.models import AuditEvent, Role

pytestmark = pytest.mark.django_db

# Statements of one POST /api/v1/jobs/ once the caches are warm (the token, the placement,
# the tenant's quota presence): the project named (with its tenant), then one statement that
# writes the job (already admitted), its first attempt, its two events (PENDING, QUEUED) and
# the audit event (apps/core/statements.py). Savepoints (the test's transaction) not counted.
SUBMIT_OWNER = 2
# A member also needs their project membership: the API layer and the service each authorise
# at their own boundary, and the request's actor keeps the answer (apps/core/actor.py).
SUBMIT_MEMBER = SUBMIT_OWNER + 1
# A tenant with a quota: the job, its PENDING event and the audit event are written, then
# admission runs (the quotas, the tenant's lock, the pending jobs with their projects and
# tenant, the books, their last attempts, the attempt, the event, the jobs' update) and the
# job is read back to answer (the job, attempts, events, their attempts, signatures, the
# attempt's dataset versions and stages).
SUBMIT_WITH_QUOTA = 17
# GET /api/v1/jobs/{id}/: the job with its signatures' names, its attempts, their dataset
# versions and stages, its events with their attempts (model versions: none here)
DETAIL = 5


def spec(world, name: str = "job", **extra) -> dict:
    return {
        "project": str(world.project.id),
        "name": name,
        "command": ["true"],
        "resources": {"gpus_per_node": 0, "time_limit": 1},
        **extra,
    }


def statements(captured) -> list[str]:
    return [
        q["sql"]
        for q in captured.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]


def post(client, body, url="job-list") -> tuple[dict, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = client.post(reverse(url), body, format="json")
    assert response.status_code == 201, response.content
    return response.json(), statements(captured)


def as_serialized(job_id, serializer=JobDetailSerializer) -> dict:
    """The job read back from the database, through the serializer, as JSON would carry it."""
    job = (
        Job.objects.select_related("project", "user", "cluster")
        .prefetch_related("attempts", "events__attempt")
        .get(pk=job_id)
    )
    return json.loads(JSONRenderer().render(serializer(job).data))


def test_a_submit_costs_two_statements_for_an_owner_and_three_for_a_member(acme, cluster):
    owner, member = acme.client(Role.OWNER), acme.client(Role.MEMBER)
    post(owner, spec(acme, "warm"))  # the token, the placement, the quota presence: cached
    post(member, spec(acme, "warm-member"))
    for i in range(3):
        _, sql = post(owner, spec(acme, f"owner-{i}"))
        assert len(sql) == SUBMIT_OWNER, "\n".join(sql)
        _, sql = post(member, spec(acme, f"member-{i}"))
        assert len(sql) == SUBMIT_MEMBER, "\n".join(sql)


def test_a_jobs_detail_costs_five_statements_with_its_signatures(acme, cluster):
    """What a pipeline polls: the job (its failure signatures a subquery), its attempts, their
    dataset versions and stages, its events with their attempts."""
    client = acme.client(Role.OWNER)
    body, _ = post(client, spec(acme, "polled"))
    job = Job.objects.get(pk=body["id"])
    signature = FailureSignature.objects.create(tenant=job.tenant, name="oom", query="OOM")
    SignatureMatch.objects.create(signature=signature, job=job, attempt=job.attempts.get(), lines=2)
    url = reverse("job-detail", args=[job.pk])
    client.get(url)  # the token: cached
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    assert len(statements(captured)) == DETAIL, "\n".join(statements(captured))
    assert response.json() == as_serialized(job.pk)
    assert response.json()["signatures"] == ["oom"]


def test_a_batch_costs_the_same_statements_however_many_jobs(acme, cluster):
    client = acme.client(Role.OWNER)
    post(client, {"jobs": [spec(acme, "warm")]}, "job-batch")
    _, two = post(client, {"jobs": [spec(acme, f"a-{i}") for i in range(2)]}, "job-batch")
    body, forty = post(client, {"jobs": [spec(acme, f"b-{i}") for i in range(40)]}, "job-batch")
    assert len(forty) == len(two) == SUBMIT_OWNER, "\n".join(forty)
    assert [row["state"] for row in body["results"]] == ["QUEUED"] * 40
    for row in body["results"][:3]:
        assert row == as_serialized(row["id"], JobSerializer)


def test_a_submit_with_a_quota_costs_its_baseline(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpus=64)
    client = acme.client(Role.OWNER)
    post(client, spec(acme, "warm"))
    body, sql = post(client, spec(acme, "limited"))
    assert len(sql) == SUBMIT_WITH_QUOTA, "\n".join(sql)
    assert body["state"] == "QUEUED" and body == as_serialized(body["id"])


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"labels": {"team": "nlp"}, "priority": 7, "env": {"A": "1"}},
        {"command": "echo hi\nsleep 1", "resources": {"nodes": 2, "memory": "2G"}},
        {"restart_policy": {"max_restarts": 0}, "distributed": {"launcher": "torchrun"}},
    ],
)
def test_the_answer_is_the_serializers_for_the_job_as_written(acme, cluster, extra):
    client = acme.client(Role.MEMBER)
    body, _ = post(client, {**spec(acme, "answer"), **extra})
    assert body == as_serialized(body["id"])
    assert body["state"] == "QUEUED" and body["state_reason"] == "admitted"
    assert [(e["from_state"], e["to_state"], e["attempt"]) for e in body["events"]] == [
        ("", "PENDING", None),
        ("PENDING", "QUEUED", 1),
    ]
    job = Job.objects.get(pk=body["id"])
    assert AuditEvent.objects.filter(action="job.create", target_id=str(job.pk)).count() == 1
    assert job.attempts.get().stdout_path.endswith(f"/jobs/{job.pk}/attempt-1/stdout.log")


def test_a_bad_spec_is_refused_as_before_and_the_next_good_one_is_unaffected(acme, cluster):
    client = acme.client(Role.MEMBER)
    bad = client.post(
        reverse("job-list"),
        {**spec(acme, "bad name"), "resources": {"gpus_per_node": 99}, "privileged": True},
        format="json",
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {"privileged": ["Jobs never run privileged."]}
    # the errors are a fresh serializer's, field by field
    invalid = {**spec(acme, "bad name"), "resources": {"gpus_per_node": 99}}
    fresh = JobSpecSerializer(data=invalid)
    assert not fresh.is_valid()
    again = client.post(reverse("job-list"), invalid, format="json")
    assert again.status_code == 400
    assert again.json()["error"]["fields"] == json.loads(JSONRenderer().render(fresh.errors))
    assert set(fresh.errors) == {"name", "resources"}
    body, _ = post(client, spec(acme, "good"))
    assert body["spec"]["resources"]["gpus_per_node"] == 0
    assert body["spec"]["restart_policy"]["retry_on"] == ["node_failure", "preemption"]
    body["spec"]["restart_policy"]["retry_on"].append("x")  # answers share nothing
    assert post(client, spec(acme, "next"))[0]["spec"]["restart_policy"]["retry_on"] == [
        "node_failure",
        "preemption",
    ]


def test_a_changed_node_or_partition_moves_the_cached_placement(acme, cluster):
    client = acme.client(Role.OWNER)
    big = spec(acme, "big", resources={"cpus_per_task": 8, "time_limit": 30})
    assert post(client, big)[0]["partition"] == "gpu"
    for node in Node.objects.filter(cluster=cluster):
        node.cpus = 4
        node.save()
    refused = client.post(reverse("job-list"), {**big, "name": "big-2"}, format="json")
    assert refused.status_code == 400 and "resources" in refused.json()["error"]["fields"]
    for node in Node.objects.filter(cluster=cluster):
        node.cpus = 8
        node.save()
    assert post(client, {**big, "name": "big-3"})[0]["partition"] == "gpu"
    Partition.objects.filter(cluster=cluster).update()  # no signal, and nothing changed
    partition = Partition.objects.get(cluster=cluster)
    partition.max_time_minutes = 10
    partition.save()
    refused = client.post(reverse("job-list"), {**big, "name": "big-4"}, format="json")
    assert refused.status_code == 400 and "resources" in refused.json()["error"]["fields"]


def test_a_node_saved_unchanged_keeps_the_cached_placement(acme, cluster):
    client = acme.client(Role.OWNER)
    post(client, spec(acme, "warm"))
    for node in Node.objects.filter(cluster=cluster):
        node.state = "MIXED"  # what the reconciler saves on every pass: not placement's
        node.save()
    _, sql = post(client, spec(acme, "after"))
    assert len(sql) == SUBMIT_OWNER, "\n".join(sql)


def test_a_quota_added_or_removed_moves_a_tenant_to_and_from_admission(acme, cluster):
    client = acme.client(Role.OWNER)
    assert post(client, spec(acme, "free"))[0]["state"] == "QUEUED"
    quota = Quota.objects.create(tenant=acme.tenant, running_jobs=1)
    body, _ = post(client, spec(acme, "held"))
    assert body["state"] == "PENDING"
    assert body["state_reason"] == "tenant acme: 1 of 1 jobs running"
    assert body["queue_position"] == 1
    assert body == as_serialized(body["id"])
    quota.delete()  # admission on the change admits the waiting job (on_limits_changed)
    body, sql = post(client, spec(acme, "free-again"))
    assert body["state"] == "QUEUED" and len(sql) == SUBMIT_OWNER + 1  # presence read again
    assert Job.objects.get(name="held").state in ("PENDING", "QUEUED")


def test_another_tenants_quota_leaves_this_tenants_cache_alone(acme, globex, cluster):
    client = acme.client(Role.OWNER)
    post(client, spec(acme, "warm"))
    Quota.objects.create(tenant=globex.tenant, running_jobs=0)
    _, sql = post(client, spec(acme, "after"))
    assert len(sql) == SUBMIT_OWNER, "\n".join(sql)
    events = JobEvent.objects.filter(job__name="after").order_by("created_at")
    assert [e.to_state for e in events] == ["PENDING", "QUEUED"]
