"""Attempts the cluster accepted, recorded in one statement: each attempt SUBMITTED with its
backend id, its job moved QUEUED -> SUBMITTED, and the event of that move.

With the ORM this was seven round trips a dispatch pass (BEGIN, the attempts and the jobs
locked, two updates, the events, COMMIT), each with its model objects. Each UPDATE here
re-checks its row's state once it holds the row's lock (an attempt cancelled or a job moved
meanwhile is left as it is), attempts before jobs as before.
"""

from datetime import datetime

import orjson
from django.db import connection

from apps.jobs.models import AttemptState, Job, JobAttempt, JobEvent
from apps.jobs.states import State, check_transition

STATEMENT = """
WITH given AS (
    SELECT * FROM jsonb_to_recordset(%(given)s::jsonb) AS g(id uuid, backend_id text, reason text)
), attempts AS (
    UPDATE {attempt} a SET state = %(submitted_attempt)s, backend_id = given.backend_id,
        submitted_at = %(at)s, updated_at = %(at)s
    FROM given WHERE a.id = given.id AND a.state = %(submitting)s
    RETURNING a.id, a.job_id, a.number, given.reason
), jobs AS (
    UPDATE {job} j SET state = %(to)s, state_reason = attempts.reason, updated_at = %(at)s
    FROM attempts WHERE j.id = attempts.job_id AND j.state = %(from)s
    RETURNING j.id, j.tenant_id, j.project_id, attempts.id AS attempt_id, attempts.number,
        attempts.reason
), events AS (
    INSERT INTO {event} (id, created_at, updated_at, job_id, attempt_id, from_state, to_state,
        reason)
    SELECT gen_random_uuid(), %(at)s, %(at)s, id, attempt_id, %(from)s, %(to)s, reason FROM jobs
    RETURNING id, job_id
)
SELECT events.id, jobs.id, jobs.tenant_id, jobs.project_id, jobs.attempt_id, jobs.number,
    jobs.reason
FROM events JOIN jobs ON jobs.id = events.job_id
"""


def record(*, reasons: dict, backend_ids: dict, at: datetime) -> list[JobEvent]:
    """Record the backend ids ({attempt id: id}) with each job's reason ({attempt id: text});
    the events written, with enough of their jobs and attempts to publish them."""
    check_transition(State.QUEUED, State.SUBMITTED)
    quote = connection.ops.quote_name
    sql = STATEMENT.format(
        attempt=quote(JobAttempt._meta.db_table),
        job=quote(Job._meta.db_table),
        event=quote(JobEvent._meta.db_table),
    )
    given = [
        {"id": str(pk), "backend_id": backend_id, "reason": reasons[pk]}
        for pk, backend_id in backend_ids.items()
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "given": orjson.dumps(given).decode(),
                "at": at,
                "submitted_attempt": AttemptState.SUBMITTED,
                "submitting": AttemptState.SUBMITTING,
                "from": State.QUEUED,
                "to": State.SUBMITTED,
            },
        )
        rows = cursor.fetchall()
    events = []
    for event_id, job_id, tenant_id, project_id, attempt_id, number, reason in rows:
        job = Job(id=job_id, tenant_id=tenant_id, project_id=project_id, state=State.SUBMITTED)
        attempt = JobAttempt(id=attempt_id, job=job, number=number)
        events.append(
            JobEvent(
                id=event_id,
                job=job,
                attempt=attempt,
                from_state=State.QUEUED,
                to_state=State.SUBMITTED,
                reason=reason,
                created_at=at,
            )
        )
    return events
