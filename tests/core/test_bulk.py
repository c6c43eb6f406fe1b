"""apps/core/bulk.py: many rows, one UPDATE, each field's value as Django would write it."""

from datetime import UTC, datetime

from apps.core.bulk import bulk_update
from apps.jobs.models import Job
from apps.tenancy.models import Role
from tests.factories import make_job


def test_rows_are_written_with_their_types_in_one_statement(
    acme, cluster, django_assert_num_queries
):
    jobs = [
        make_job(project=acme.project, user=acme.users[Role.MEMBER], cluster=cluster)
        for _ in range(3)
    ]
    untouched = make_job(project=acme.project, user=acme.users[Role.MEMBER], cluster=cluster)
    when = datetime(2026, 12, 1, 12, 30, 15, 123456, tzinfo=UTC)
    for n, job in enumerate(jobs):
        job.state, job.state_reason, job.queue_position = "SUBMITTED", f'it\'s "{n}"\n', n
        job.started_at = when if n else None
        job.labels = {"team": f"t{n}", "n": [n, None]}
    with django_assert_num_queries(1):
        assert (
            bulk_update(jobs, ["state", "state_reason", "queue_position", "started_at", "labels"])
            == 3
        )
    for n, job in enumerate(jobs):
        job.refresh_from_db()
        assert (job.state, job.state_reason, job.queue_position) == (
            "SUBMITTED",
            f'it\'s "{n}"\n',
            n,
        )
        assert job.started_at == (when if n else None)
        assert job.labels == {"team": f"t{n}", "n": [n, None]}
    assert Job.objects.get(pk=untouched.pk).state == untouched.state
    assert bulk_update([], ["state"]) == 0
