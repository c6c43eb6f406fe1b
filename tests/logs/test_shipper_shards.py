"""Shippers share the shards by leases on the real Redis: each holds its share, a new one gets
work, a dead one's shards pass to the survivor within seconds, and with two shippers running
and one killed mid-stream every line is indexed once."""

import os
import signal
import time
import uuid

import pytest

from apps.jobs.models import JobAttempt
from apps.logs.models import LogCursor
from apps.logs.shards import ShardLeases
from tests.factories import make_running_attempt
from tests.logs.conftest import count
from tests.logs.test_shipper import _shipper_env, finish, shipper_process, write


@pytest.fixture
def leases():
    made = []

    def make(**kwargs) -> ShardLeases:
        made.append(ShardLeases(**kwargs))
        return made[-1]

    yield make
    for shards in made:
        shards.release()


def test_shippers_split_the_shards_and_a_dead_ones_pass_on(leases):
    a = leases(shards=8, ttl=1)
    assert a.refresh(force=True) == set(range(8))  # alone: all of them
    b = leases(shards=8, ttl=1)
    assert b.refresh(force=True) == set()  # all held; a gives its extra back on its renewal
    assert len(a.refresh(force=True)) == 4
    held_b = b.refresh(force=True)
    assert len(held_b) == 4 and not held_b & a.held
    assert all(a.owns(uuid.UUID(int=n)) and not b.owns(uuid.UUID(int=n)) for n in a.held)

    time.sleep(1.2)  # a stops renewing (dead): its member entry and its leases expire
    assert b.refresh(force=True) == set(range(8))
    assert a.refresh(force=True) == set()  # back from a pause: what it held is b's now

    b.release()  # a clean stop gives everything back at once
    assert a.refresh(force=True) == set(range(8))


def _attempts(acme, cluster, logs_dir, n: int) -> list[JobAttempt]:
    return [
        make_running_attempt(world=acme, cluster=cluster, directory=logs_dir, stem=f"{i}.")
        for i in range(n)
    ]


@pytest.mark.django_db(transaction=True)
def test_two_shippers_one_killed_mid_stream_lose_and_double_nothing(es, acme, cluster, logs_dir):
    attempts = _attempts(acme, cluster, logs_dir, 8)
    env = {**_shipper_env(), "TORUS_SHIPPER_SHARDS": "8", "TORUS_SHIPPER_LEASE_SECONDS": "2"}
    env["TORUS_SHIPPER_READS_PER_PASS"] = "1"  # 64 KiB per stream a pass: still busy at the kill
    first, second = shipper_process(env), shipper_process(env)
    lines = 0
    try:
        deadline = time.monotonic() + 60
        while not all(_holds(shipper, 8) for shipper in (first, second)):  # both started
            assert time.monotonic() < deadline, _holders(8)
            time.sleep(0.2)
        for round_ in range(12):  # the jobs keep writing while shippers come and go
            for attempt in attempts:
                write(attempt, b"".join(b"r%d line %d\n" % (round_, i) for i in range(2000)))
            lines += 2000 * len(attempts)
            if round_ == 4:
                assert _holds(first, 8)
                os.killpg(first.pid, signal.SIGKILL)
                first.wait()
                killed_at = {a.pk: _offset(a) for a in attempts}
            time.sleep(0.5)
        for attempt in attempts:
            finish(attempt)
        deadline = time.monotonic() + 120
        while LogCursor.objects.filter(attempt__in=attempts, complete=True).count() < 16:
            assert second.poll() is None, "the surviving shipper exited"
            assert time.monotonic() < deadline, "the survivor did not take the dead one's shards"
            time.sleep(0.5)
    finally:
        for shipper in (first, second):
            if shipper.poll() is None:
                os.killpg(shipper.pid, signal.SIGKILL)
                shipper.wait()
    # every stream moved on after the kill (the dead shipper's ones too) and every line is
    # there once: ids by offset make a line shipped twice one document
    assert all(_offset(a) > killed_at[a.pk] for a in attempts)
    assert sum(count(attempt=a) for a in attempts) == lines
    for attempt in attempts:
        assert count(attempt=attempt, query="r11 line 1999") == 1


def _holders(shards: int) -> list[str]:
    leases = ShardLeases(shards=shards, ttl=1).leases  # (reads only: takes nothing)
    return [lease.current_holder() or "" for lease in leases]


def _holds(shipper, shards: int) -> bool:
    return any(f":{shipper.pid}:" in holder for holder in _holders(shards))


def _offset(attempt: JobAttempt) -> int:
    cursor = LogCursor.objects.filter(attempt=attempt, stream="stdout").first()
    return cursor.offset if cursor else 0
