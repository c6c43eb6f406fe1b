"""Where the job page's backlog comes from (apps/logs/backlog.py): a running attempt's lines
from Elasticsearch, an ended attempt's from its log source, as GET /jobs/{id}/logs/ reads
them, whether or not the shipper has caught up and whatever Elasticsearch still has; the
lines the shipper sends afterwards are not sent to the viewer again."""

import os

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import JobAttempt
from apps.logs.backlog import FIRST_READ_BYTES, job_backlog
from apps.logs.search_backlog import last_lines
from apps.logs.shipper import ship_pass
from apps.tenancy.models import Role
from config.asgi import application
from tests.factories import make_job
from tests.logs.conftest import count, delete_tenant_indices

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def _attempt(job, logs_dir, number: int, state: str) -> JobAttempt:
    return JobAttempt.objects.create(
        job=job,
        number=number,
        state=state,
        nodes=["n1"],
        stdout_path=str(logs_dir / f"{number}-out"),
        stderr_path=str(logs_dir / f"{number}-err"),
    )


@pytest.fixture
def running(acme, cluster, logs_dir):
    job = make_job(
        project=acme.project, user=acme.users[Role.MEMBER], state="RUNNING", cluster=cluster
    )
    return job, _attempt(job, logs_dir, 1, "RUNNING")


def _write(path: str, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)


def _end(job, attempt) -> None:
    JobAttempt.objects.filter(pk=attempt.pk).update(state="SUCCEEDED")
    type(job).objects.filter(pk=job.pk).update(state="SUCCEEDED")


async def _open(job, token: str) -> tuple[WebsocketCommunicator, dict]:
    ws = WebsocketCommunicator(
        application,
        f"/ws/jobs/{job.pk}/",
        headers=[ORIGIN, (b"authorization", f"Bearer {token}".encode())],
    )
    assert (await ws.connect())[0]
    backlog = await ws.receive_json_from(timeout=10)
    assert backlog["type"] == "backlog"
    return ws, backlog


def _messages(lines: list[dict]) -> list[str]:
    return [line["message"] for line in lines]


async def test_at_the_boundary_a_running_attempt_reads_search_an_ended_one_its_log(
    es, acme, running
):
    """Unshipped output: while its attempt runs, the backlog (Elasticsearch) has none of it;
    once the attempt has ended, the backlog has all of it, from the attempt's log, the lines
    the logs endpoint returns; the shipper's later batch shows none of them twice."""
    job, attempt = running
    _write(attempt.stdout_path, "alpha\nbeta\n")
    _write(attempt.stderr_path, "WARNING gamma\n")
    ws, backlog = await _open(job, acme.tokens[Role.VIEWER])
    assert backlog["lines"] == []  # running: Elasticsearch, where nothing is yet
    await ws.disconnect()

    await sync_to_async(_end)(job, attempt)
    ws, backlog = await _open(job, acme.tokens[Role.VIEWER])
    assert backlog["state"] == "SUCCEEDED"
    assert backlog["streams"] == {"attempt": 1, "stdout": False, "stderr": False}  # not shipped
    assert _messages(backlog["lines"]) == ["alpha", "beta", "WARNING gamma"]
    assert [(x["stream"], x["offset"], x["level"]) for x in backlog["lines"]] == [
        ("stdout", 0, None),
        ("stdout", 6, None),
        ("stderr", 0, "WARNING"),
    ]
    api = await sync_to_async(acme.client(Role.VIEWER).get)(
        reverse("job-output-logs", kwargs={"pk": job.pk})
    )
    assert api.json()["data"].splitlines() == ["alpha", "beta"]  # the same source
    # the shipper catches up: its lines are the backlog's, so the viewer gets only the ends
    await sync_to_async(ship_pass)()
    assert await sync_to_async(count)(job=job) == 3
    after = [await ws.receive_json_from(timeout=10) for _ in range(2)]
    assert {m["type"] for m in after} == {"stream_end"}
    assert await ws.receive_nothing(timeout=0.5)
    await ws.disconnect()


async def test_a_running_attempt_still_streams_its_new_lines_once(es, acme, running):
    """The control: a running attempt's backlog from Elasticsearch, then only the lines after
    it, each once, even when the shipper sends a batch the backlog already held."""
    job, attempt = running
    _write(attempt.stdout_path, "one\ntwo\n")
    await sync_to_async(ship_pass)()
    ws, backlog = await _open(job, acme.tokens[Role.VIEWER])
    assert _messages(backlog["lines"]) == ["one", "two"]
    _write(attempt.stdout_path, "three\n")
    await sync_to_async(ship_pass)()
    lines = await ws.receive_json_from(timeout=10)
    assert lines["type"] == "lines" and _messages(lines["lines"]) == ["three"]
    # a batch sent again (a shipper killed before its cursor moved re-sends it): not shown
    from apps.logs.live import publish_lines

    again = [{**line, "attempt_number": 1} for line in backlog["lines"]]
    await sync_to_async(publish_lines)(job_id=job.pk, lines=again)
    assert await ws.receive_nothing(timeout=0.5)
    await ws.disconnect()


def test_an_ended_attempt_shows_its_lines_once_search_has_lost_them(es, acme, running):
    """Indices past their retention (or lost): the logs endpoint still returns the output,
    and so does the backlog; a running attempt's, from search, is then empty."""
    job, attempt = running
    _write(attempt.stdout_path, "kept in the file\n")
    ship_pass()
    delete_tenant_indices(acme.tenant.slug)
    assert job_backlog(job=job, count=10).lines == []  # running: search only
    _end(job, attempt)
    backlog = job_backlog(job=job, count=10)
    assert _messages(backlog.lines) == ["kept in the file"]
    assert backlog.sources == {1: "log"} and backlog.seen == {(1, "stdout"): 0}


def test_an_ended_attempt_whose_log_is_gone_falls_back_to_search(es, acme, running):
    job, attempt = running
    _write(attempt.stdout_path, "shipped\n")
    _write(attempt.stderr_path, "")
    ship_pass()
    _end(job, attempt)
    for path in (attempt.stdout_path, attempt.stderr_path):
        os.remove(path)
    backlog = job_backlog(job=job, count=10)
    assert _messages(backlog.lines) == ["shipped"] and backlog.sources == {1: "search"}


def test_attempts_newest_first_each_from_its_own_source(es, acme, running, logs_dir):
    """A restarted job: the ended first attempt from its log, the running second from
    search; the tail spans both, oldest line first."""
    job, first = running
    _write(first.stdout_path, "one\ntwo\nthree\n")
    JobAttempt.objects.filter(pk=first.pk).update(state="FAILED")
    second = _attempt(job, logs_dir, 2, "RUNNING")
    _write(second.stdout_path, "four\nfive\nnot shipped yet")  # no newline: not a line yet
    ship_pass()
    backlog = job_backlog(job=job, count=4)
    assert _messages(backlog.lines) == ["two", "three", "four", "five"]
    assert [line["attempt_number"] for line in backlog.lines] == [1, 1, 2, 2]
    assert backlog.sources == {2: "search", 1: "log"}
    assert backlog.seen == {(2, "stdout"): 5, (1, "stdout"): 8}
    assert _messages(job_backlog(job=job, count=2, stream="stdout").lines) == ["four", "five"]


def test_the_log_tail_is_what_the_shipper_indexed(es, acme, running, settings):
    """Beyond the first read window, with tracebacks, timestamps, levels, an over-long line
    and a secret: the tail read from the log is line for line (offset, level, masked text)
    what the shipper put in Elasticsearch."""
    from apps.secrets import crypto
    from apps.secrets.models import SecretUse

    settings.TORUS_LOG_MAX_LINE = 256
    secret = "hf_s3cr3t_value_42"
    job, attempt = running
    job.spec = {**job.spec, "secrets": ["HF_TOKEN"]}
    job.save(update_fields=["spec"])
    SecretUse.objects.create(
        attempt=attempt,
        name="HF_TOKEN",
        version=1,
        ciphertext=crypto.encrypt(secret),
        created_at=timezone.now(),
    )
    JobAttempt.objects.filter(pk=attempt.pk).update(backend_id="1")
    attempt.refresh_from_db()
    chunks = []
    for i in range(3000):  # every event with its own time, in order (search sorts by them)
        stamp = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"
        chunks.append(f"{stamp} INFO step {i} token {secret}\n")
        if i % 250 == 7:
            chunks.append(
                f"{stamp} ERROR Traceback (most recent call last):\n"
                '  File "train.py", line 1, in <module>\n'
                "ValueError: bad\n"
            )
        if i == 2900:
            chunks.append(f"{stamp} " + "x" * 1000 + "\n")
    text = "".join(chunks)
    assert len(text) > 2 * FIRST_READ_BYTES
    _write(attempt.stdout_path, text)
    _write(attempt.stderr_path, "ERROR on stderr\n")
    _end(job, attempt)
    attempt.refresh_from_db()
    ship_pass()
    count(job=job)  # refreshed

    def fields(lines):
        return [(x["stream"], x["offset"], x["level"], x["message"]) for x in lines]

    for tail in (500, 2000):  # within the first window, and past it
        backlog = job_backlog(job=job, count=tail, stream="stdout")
        indexed = last_lines(job=job, count=tail, stream="stdout")
        assert backlog.sources == {1: "log"}
        assert len(backlog.lines) == tail and fields(backlog.lines) == fields(indexed)
        assert all(secret not in line["message"] for line in backlog.lines)
        assert any("Traceback" in line["message"] for line in backlog.lines)
    assert any("truncated at 256 bytes" in line["message"] for line in backlog.lines)


def test_an_ended_attempts_streams_merge_by_the_times_their_lines_carry(acme, running):
    job, attempt = running
    _write(attempt.stdout_path, "no time yet\n2026-01-01T00:00:10Z second\n")
    _write(attempt.stderr_path, "2026-01-01T00:00:05Z first\nthen, in its second\n")
    _end(job, attempt)
    assert _messages(job_backlog(job=job, count=10).lines) == [
        "no time yet",
        "2026-01-01T00:00:05Z first",
        "then, in its second",
        "2026-01-01T00:00:10Z second",
    ]
    # a stream never written (no file) has no lines; the other still shows
    os.remove(attempt.stderr_path)
    assert _messages(job_backlog(job=job, count=10).lines)[-1] == "2026-01-01T00:00:10Z second"
