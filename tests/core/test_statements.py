"""apps/core/statements.py: the rows of several models in one INSERT statement, every value as
Django would save it, all or none."""

import uuid
from datetime import UTC, datetime

import pytest
from django.db import IntegrityError

from apps.core.statements import insert_together
from apps.jobs.models import Job, JobAttempt, JobEvent
from apps.tenancy.models import AuditEvent, Role


def unsaved_job(world, cluster, name: str) -> Job:
    return Job(
        tenant=world.tenant,
        project=world.project,
        user=world.users[Role.MEMBER],
        name=name,
        spec={"name": name, "command": {"script": 'echo "it\'s"\nexit 0'}, "n": [1, None, 2.5]},
        labels={"team": "nlp", "ünï": "cödé"},
        state="QUEUED",
        state_reason="admitted",
        cluster=cluster,
        admitted_at=datetime(2026, 12, 4, 12, 30, 15, 123456, tzinfo=UTC),
        gpus=8,
    )


def fields_of(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def test_the_rows_of_several_models_are_one_statement_and_read_back_as_written(
    acme, cluster, django_assert_num_queries
):
    jobs = [unsaved_job(acme, cluster, f"j{n}") for n in range(2)]
    attempts = [
        JobAttempt(job=job, number=1, excluded_nodes=["n1"], state="QUEUED") for job in jobs
    ]
    events = [
        JobEvent(job=jobs[0], to_state="PENDING", reason="submitted"),
        JobEvent(job=jobs[0], attempt=attempts[0], from_state="PENDING", to_state="QUEUED"),
    ]
    audit = AuditEvent(
        tenant=acme.tenant, action="job.create", changes={"name": [None, "j0"]}, ip="10.1.2.3"
    )
    with django_assert_num_queries(1):
        insert_together(
            (Job, jobs), (JobAttempt, attempts), (JobEvent, events), (AuditEvent, [audit])
        )
    for obj in [*jobs, *attempts, *events, audit]:
        assert obj.created_at is not None and not obj._state.adding
        assert fields_of(type(obj).objects.get(pk=obj.pk)) == fields_of(obj)
    jobs[1].state = "CANCELLED"
    jobs[1].save()  # saved rows: an UPDATE, not a second INSERT
    assert Job.objects.get(pk=jobs[1].pk).state == "CANCELLED"
    with django_assert_num_queries(1):  # an empty group writes nothing
        insert_together((Job, [unsaved_job(acme, cluster, "j2")]), (JobAttempt, []))
    assert Job.objects.filter(tenant=acme.tenant).count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_bad_row_in_any_group_leaves_nothing_of_the_statement(acme, cluster):
    job = unsaved_job(acme, cluster, "kept-out")
    elsewhere = JobAttempt(job_id=uuid.uuid4(), number=1)  # its job is in no group
    with pytest.raises(IntegrityError):  # the foreign key, checked as the statement ends
        insert_together((Job, [job]), (JobAttempt, [elsewhere]))
    twice = [JobAttempt(job=job, number=1), JobAttempt(job=job, number=1)]
    with pytest.raises(IntegrityError):  # the attempt's number, unique within its job
        insert_together((Job, [job]), (JobAttempt, twice))
    assert not Job.objects.filter(name="kept-out").exists()
    assert not JobAttempt.objects.exists()
    insert_together((Job, [unsaved_job(acme, cluster, "fine")]))
    assert Job.objects.filter(name="fine").count() == 1
