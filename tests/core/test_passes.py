"""apps/core/passes.py on the real database: an item that raises is rolled back, marked,
counted and logged once, and the pass goes on; the next success clears it."""

import logging
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection
from django.utils import timezone

from apps.core.models import PassCounter, PassFailure
from apps.core.passes import Pass, describe, failure_totals
from tests.factories import TenantFactory


def _run(a_pass: Pass, items: dict) -> list[str]:
    """A pass over {key: work}; the keys whose work went through."""
    done = []
    for key, work in items.items():
        with a_pass.item(key, on_failure=lambda error, key=key: marks.append((key, error))):
            work()
            done.append(key)
    return done


marks: list = []


@pytest.fixture(autouse=True)
def _no_marks():
    marks.clear()


def _boom():
    raise ValueError("no such thing")


def test_a_failing_item_is_marked_counted_and_the_others_go_on(db, caplog):
    caplog.set_level(logging.WARNING, logger="apps.core.passes")
    a_pass = Pass("test-pass")
    made = []
    items = {"a": lambda: made.append(TenantFactory(slug="first")), "b": _boom, "c": lambda: None}
    assert _run(a_pass, items) == ["a", "c"]
    assert [(key, str(error)) for key, error in marks] == [("b", "no such thing")]
    failure = PassFailure.objects.get(pass_name="test-pass")
    assert (failure.item_key, failure.count) == ("b", 1)
    assert failure.error == "ValueError: no such thing"
    assert _run(a_pass, items | {"a": lambda: None}) == ["a", "c"]  # and again: counted
    assert PassFailure.objects.get(pk=failure.pk).count == 2
    assert PassCounter.objects.get(pass_name="test-pass").failures == 2
    assert len([r for r in caplog.records if "test-pass" in r.getMessage()]) == 1  # once

    # a new error text is logged again; a success clears the item, the counter stays
    _run(a_pass, {"b": lambda: (_ for _ in ()).throw(KeyError("other"))})
    assert len([r for r in caplog.records if "test-pass" in r.getMessage()]) == 2
    _run(a_pass, {"b": lambda: None})
    assert not PassFailure.objects.filter(pass_name="test-pass").exists()
    assert PassCounter.objects.get(pass_name="test-pass").failures == 3
    assert failure_totals()["test-pass"] == {"failures": 3, "failing": 0, "in_a_row": 0}


def test_a_database_error_in_an_item_leaves_no_failed_transaction(db):
    """Inside the test's transaction (as a pass called from another transaction would be):
    the item's savepoint is rolled back, the failure is recorded and the next item writes."""
    TenantFactory(slug="taken")
    a_pass = Pass("test-db")
    done = _run(
        a_pass,
        {
            "dup": lambda: TenantFactory(slug="taken"),  # unique slug: IntegrityError
            "next": lambda: TenantFactory(slug="next"),
        },
    )
    assert done == ["next"]
    assert isinstance(marks[0][1], IntegrityError)
    assert PassFailure.objects.get(pass_name="test-db").item_key == "dup"
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")  # the connection is usable


def test_keyboard_interrupt_and_system_exit_are_not_items_failures(db):
    a_pass = Pass("test-base")
    for error in (KeyboardInterrupt, SystemExit):

        def stop(error=error):
            raise error

        with pytest.raises(error):
            _run(a_pass, {"x": stop})
    assert not PassFailure.objects.filter(pass_name="test-base").exists()


def test_a_marking_that_fails_is_logged_and_the_failure_still_counted(db, caplog):
    a_pass = Pass("test-mark")

    def bad_mark(error):
        raise RuntimeError("cannot mark")

    with a_pass.item("x", on_failure=bad_mark):
        _boom()
    assert PassFailure.objects.get(pass_name="test-mark").count == 1
    assert "could not be marked" in caplog.text


def test_a_parked_item_waits_out_a_doubling_backoff(db):
    a_pass = Pass("test-park", refresh_seconds=0)
    assert not a_pass.parked(key="s", base_seconds=10, max_seconds=60)
    a_pass.failed(key="s", error="unreadable")
    assert a_pass.parked(key="s", base_seconds=10, max_seconds=60)
    earlier = timezone.now() - timedelta(seconds=11)
    PassFailure.objects.filter(pass_name="test-park").update(last_at=earlier)
    assert not a_pass.parked(key="s", base_seconds=10, max_seconds=60)  # 10 s after 1
    PassFailure.objects.filter(pass_name="test-park").update(count=3, last_at=earlier)
    assert a_pass.parked(key="s", base_seconds=10, max_seconds=60)  # 40 s after 3
    PassFailure.objects.filter(pass_name="test-park").update(
        count=30, last_at=timezone.now() - timedelta(seconds=61)
    )
    assert not a_pass.parked(key="s", base_seconds=10, max_seconds=60)  # at most 60 s


def test_describe_names_errors_that_are_not_ours():
    assert describe(KeyError("restart_policy")) == "KeyError: 'restart_policy'"
    assert describe(OSError(2, "gone")) == "FileNotFoundError: [Errno 2] gone"
    assert describe("plain words") == "plain words"
    assert len(describe("x" * 5000)) == 2000


def test_torus_doctor_lists_the_open_failures(db, capsys):
    Pass("dispatch").failed(key="job:1234", error="could not prepare its identity: gone")
    call_command("torus_doctor", "--passes-only")
    out = capsys.readouterr().out
    assert "failing: pass dispatch item job:1234: 1 in a row" in out
    assert "could not prepare its identity: gone" in out
    assert "pass dispatch: 1 failures counted, 1 items failing now" in out
    PassFailure.objects.all().delete()
    call_command("torus_doctor", "--passes-only")
    assert "ok: no pass has an item it cannot handle" in capsys.readouterr().out
