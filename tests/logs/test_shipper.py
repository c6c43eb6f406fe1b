"""The shipper on the real Elasticsearch: every line once, tracebacks whole, long lines
truncated, garbage survived, and nothing lost or doubled when it is killed mid-stream."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps.jobs.models import JobAttempt
from apps.logs.models import LogCursor
from apps.logs.shipper import ship_pass
from tests.factories import make_running_attempt
from tests.logs.conftest import count
from tests.stack import portal_env

ROOT = Path(__file__).resolve().parents[2]


def shipper_process(env: dict) -> subprocess.Popen:
    """`manage.py run_shipper` in its own session (killed with its group)."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "run_shipper"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def write(attempt, data: bytes, stream: str = "stdout") -> None:
    path = attempt.stdout_path if stream == "stdout" else attempt.stderr_path
    with open(path, "ab") as handle:
        handle.write(data)


def finish(attempt) -> None:
    JobAttempt.objects.filter(pk=attempt.pk).update(state="SUCCEEDED")


def test_every_line_once_with_deterministic_ids(es, attempt):
    write(attempt, b"".join(b"line %d\n" % i for i in range(500)))
    write(attempt, b"2026-11-29T10:00:00Z ERROR disk full\n", "stderr")
    ship_pass()
    ship_pass()  # a second pass over the same bytes adds nothing
    assert count(attempt=attempt) == 501
    doc = es.get(
        index=f"torus-logs-{attempt.job.tenant.slug}-2026.11.29", id=f"{attempt.pk}:stderr:0"
    )["_source"]
    assert doc["level"] == "ERROR" and doc["timestamp"].startswith("2026-11-29T10:00:00")
    assert doc["tenant"] == str(attempt.job.tenant_id) and doc["node"] == "n1"
    cursor = LogCursor.objects.get(attempt=attempt, stream="stdout")
    assert cursor.offset == Path(attempt.stdout_path).stat().st_size and cursor.lines == 500


def test_a_pass_with_nothing_new_is_two_statements_however_many_streams(
    es, acme, cluster, logs_dir, django_assert_num_queries
):
    """Ten passes a second over the running attempts: one that finds nothing new reads the
    attempts and their cursors and writes nothing (it used to read and rewrite every
    stream's cursor), and a later line is still shipped once."""
    attempts = [
        make_running_attempt(world=acme, cluster=cluster, directory=logs_dir, stem=f"{i}-")
        for i in range(4)
    ]
    for attempt in attempts:
        write(attempt, b"first\n")
    assert ship_pass().documents == 4
    with django_assert_num_queries(2):
        assert ship_pass().documents == 0
    write(attempts[0], b"second\n", "stderr")
    assert ship_pass().documents == 1
    assert [count(attempt=attempt) for attempt in attempts] == [2, 1, 1, 1]
    assert LogCursor.objects.get(attempt=attempts[0], stream="stderr").lines == 1


def test_a_partial_line_waits_for_its_newline_or_the_end(es, attempt):
    write(attempt, b"complete\nhalf a li")
    ship_pass()
    assert count(attempt=attempt) == 1
    write(attempt, b"ne\nno newline at the end")
    ship_pass()
    assert count(attempt=attempt, query="half a line") == 1
    finish(attempt)
    ship_pass()
    assert count(attempt=attempt) == 3
    assert LogCursor.objects.get(attempt=attempt, stream="stdout").complete


def test_a_traceback_is_one_event(es, attempt):
    write(
        attempt,
        b"before\nTraceback (most recent call last):\n"
        b'  File "train.py", line 3, in <module>\n    main()\n'
        b"RuntimeError: CUDA out of memory\nafter\n",
    )
    ship_pass()
    assert count(attempt=attempt) == 3
    hits = es.search(
        index=f"torus-logs-{attempt.job.tenant.slug}-*",
        query={"match_phrase": {"message": "CUDA out of memory"}},
    )["hits"]["hits"]
    assert len(hits) == 1
    assert hits[0]["_source"]["message"].startswith("Traceback (most recent call last):")
    assert 'File "train.py"' in hits[0]["_source"]["message"]


def test_long_lines_are_truncated_and_garbage_survives(es, attempt, settings):
    settings.TORUS_LOG_MAX_LINE = 1000
    write(attempt, b"x" * 5000 + b"\n" + b"\xff\xfe bad \xc3(utf8\n" + b"\x00\x01 binary\n")
    ship_pass()
    assert count(attempt=attempt) == 3
    long = es.get(
        index=f"torus-logs-{attempt.job.tenant.slug}-{time.strftime('%Y.%m.%d', time.gmtime())}",
        id=f"{attempt.pk}:stdout:0",
    )["_source"]
    assert long["truncated"] is True and "[truncated at 1000 bytes]" in long["message"]
    assert count(attempt=attempt, query="bad") == 1


def test_a_line_longer_than_a_read_is_shipped_once_truncated(es, attempt, settings):
    settings.TORUS_SHIPPER_READ_BYTES = 65536
    write(attempt, b"y" * 200_000 + b"\nnext\n")
    for _ in range(5):
        ship_pass()
    assert count(attempt=attempt) == 2
    assert count(attempt=attempt, query="next") == 1


def _shipper_env() -> dict:
    # a shipper killed holds its shards' leases until they expire: the next one started
    # waits that long before it ships
    return portal_env(TORUS_SHIPPER_READ_BYTES="65536", TORUS_SHIPPER_LEASE_SECONDS="1")


@pytest.mark.django_db(transaction=True)
def test_killing_the_shipper_at_random_points_loses_and_doubles_nothing(es, attempt):
    total = 100_000
    rng = random.Random(7)
    write(attempt, b"".join(b"step %d loss %.4f\n" % (i, 1 / (i + 1)) for i in range(total)))
    finish(attempt)
    # one 64 KiB read a pass: 2.3 MB take longer than the three runs on any machine
    env = {**_shipper_env(), "TORUS_SHIPPER_READS_PER_PASS": "1"}

    def offset() -> int:
        cursor = LogCursor.objects.filter(attempt=attempt, stream="stdout").first()
        return cursor.offset if cursor else 0

    for _ in range(3):
        before = offset()
        shipper = shipper_process(env)
        deadline = time.monotonic() + 120  # it has started and shipped (a loaded machine is slow)
        while offset() == before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert offset() > before, "the shipper shipped nothing in 120 s"
        time.sleep(rng.uniform(0.0, 1.5))  # then killed at a random point of its work
        os.killpg(shipper.pid, signal.SIGKILL)
        shipper.wait()
    interrupted_at = LogCursor.objects.get(attempt=attempt, stream="stdout").offset
    assert 0 < interrupted_at < Path(attempt.stdout_path).stat().st_size
    for _ in range(200):
        ship_pass()
        if LogCursor.objects.get(attempt=attempt, stream="stdout").complete:
            break
    assert count(attempt=attempt) == total
    assert count(attempt=attempt, query="step 99999") == 1


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.mark.django_db(transaction=True)
def test_elasticsearch_down_for_a_minute_loses_nothing(es, attempt):
    component = ROOT / "platform" / "services" / "components" / "elasticsearch"
    shipper = shipper_process(_shipper_env())
    try:
        write(attempt, b"".join(b"before %d\n" % i for i in range(20_000)))
        deadline = time.monotonic() + 60
        while count(attempt=attempt) < 20_000:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        subprocess.run([str(component), "stop"], check=True, capture_output=True)
        rss = []
        outage_ends = time.monotonic() + 60
        i = 0
        while time.monotonic() < outage_ends:  # the job keeps writing while ES is away
            write(attempt, b"".join(b"during %d\n" % n for n in range(i, i + 5000)))
            i += 5000
            rss.append(_rss_kb(shipper.pid))
            time.sleep(2)
        offset_during = LogCursor.objects.get(attempt=attempt, stream="stdout").offset
        subprocess.run([str(component), "start"], check=True, capture_output=True, timeout=180)
        subprocess.run([str(component), "wait"], check=True, capture_output=True, timeout=180)
        finish(attempt)
        deadline = time.monotonic() + 120
        while not LogCursor.objects.get(attempt=attempt, stream="stdout").complete:
            assert time.monotonic() < deadline, "the shipper did not catch up"
            time.sleep(0.5)
    finally:
        os.killpg(shipper.pid, signal.SIGKILL)
        shipper.wait()
        subprocess.run([str(component), "start"], capture_output=True, timeout=180)
    assert offset_during == len(b"".join(b"before %d\n" % n for n in range(20_000)))
    assert count(attempt=attempt) == 20_000 + i
    assert max(rss) - min(rss) < 50 * 1024, rss  # memory stays bounded while it waits


def test_documents_elasticsearch_refuses_are_sent_again_never_skipped(es, attempt, settings):
    from elasticsearch import helpers

    settings.TORUS_SHIPPER_BULK_DOCS = 2  # several requests per read, one sender thread
    write(attempt, b"2026-11-29T10:00:00Z first\n")
    ship_pass()
    index = f"torus-logs-{attempt.job.tenant.slug}-2026.11.29"
    write(attempt, b"".join(b"2026-11-29T10:00:%02dZ line %d\n" % (i, i) for i in range(1, 8)))
    es.indices.put_settings(index=index, settings={"index.blocks.write": True})
    try:
        with pytest.raises(helpers.BulkIndexError):
            ship_pass()
    finally:
        es.indices.put_settings(index=index, settings={"index.blocks.write": False})
    assert LogCursor.objects.get(attempt=attempt, stream="stdout").lines == 1
    ship_pass()
    assert count(attempt=attempt) == 8
    assert LogCursor.objects.get(attempt=attempt, stream="stdout").lines == 8


@pytest.mark.django_db(transaction=True)
def test_a_job_deleted_while_its_logs_ship_does_not_stop_the_shipper(es, attempt, monkeypatch):
    import apps.logs.shipper as shipper

    write(attempt, b"torus-metric step=1 loss=0.5\nline\n")
    held = JobAttempt.objects.select_related("job__tenant").get(pk=attempt.pk)
    attempt.job.delete()  # the pass still holds the attempt it read before
    monkeypatch.setattr(
        shipper,
        "_active_attempts",
        lambda **_: iter([(held, "stdout", None), (held, "stderr", None)]),
    )
    assert ship_pass().streams == 0  # no IntegrityError out of the pass
    assert not LogCursor.objects.filter(attempt_id=attempt.pk).exists()


def test_an_attempt_whose_streams_completed_before_a_kill_is_marked_shipped(es, attempt):
    """A shipper SIGKILLed after its last cursor completed but before it marked the attempt
    (the 30-minute soak found one): the next pass marks it; nothing is shipped again."""
    import apps.logs.shipper as shipper

    write(attempt, b"one\n")
    finish(attempt)
    attempt.refresh_from_db()
    for stream in ("stdout", "stderr"):
        shipper.ship_stream(attempt, stream)
    JobAttempt.objects.filter(pk=attempt.pk).update(logs_shipped=False)  # the mark, lost
    assert LogCursor.objects.filter(attempt=attempt, complete=True).count() == 2
    assert ship_pass().documents == 0
    assert JobAttempt.objects.get(pk=attempt.pk).logs_shipped
    assert count(attempt=attempt) == 1


def test_a_stream_it_cannot_read_does_not_stop_the_others(es, attempt, tmp_path, caplog):
    """A file the shipper may not read (here: a directory where the log should be) is
    reported once and skipped; the other streams ship (the shipper process used to die)."""
    Path(attempt.stderr_path).mkdir()
    write(attempt, b"still shipped\n")
    ship_pass()
    ship_pass()
    assert count(attempt=attempt, query="still shipped") == 1
    assert [r.message for r in caplog.records if f"{attempt.pk}:stderr" in r.message] == [
        f"pass shipper: {attempt.pk}:stderr failed (1 in a row): "
        f"IsADirectoryError: [Errno 21] Is a directory: '{attempt.stderr_path}'"
    ]  # (parked: apps/core/passes.py; tests/logs/test_shipper_passes.py)


def test_retention_deletes_only_a_tenants_expired_days(es, acme, globex):
    from datetime import UTC, datetime, timedelta

    from apps.logs.tasks import apply_retention

    today = datetime.now(UTC)
    names = {
        "old": f"torus-logs-{acme.tenant.slug}-{today - timedelta(days=40):%Y.%m.%d}",
        "recent": f"torus-logs-{acme.tenant.slug}-{today - timedelta(days=5):%Y.%m.%d}",
        "other": f"torus-logs-{globex.tenant.slug}-{today - timedelta(days=40):%Y.%m.%d}",
        # another tenant whose slug extends acme's: acme's pattern reaches it, its days stay
        "longer_slug": f"torus-logs-{acme.tenant.slug}-labs-{today - timedelta(days=40):%Y.%m.%d}",
    }
    for name in names.values():
        es.indices.create(index=name)
    acme.tenant.log_retention_days = 30
    acme.tenant.save()
    globex.tenant.log_retention_days = 60
    globex.tenant.save()
    assert apply_retention() == 1
    assert not es.indices.exists(index=names["old"])
    assert es.indices.exists(index=names["recent"]) and es.indices.exists(index=names["other"])
    assert es.indices.exists(index=names["longer_slug"])
    es.indices.delete(index=names["longer_slug"])
