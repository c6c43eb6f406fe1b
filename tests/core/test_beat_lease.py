"""One Celery beat sends at a time (apps/core/beat.py): the lease holder. Two real `celery beat`
processes on the tests' Redis send at the rate of one; when the active one is killed the other
takes over and sends again, catching up once rather than in a burst; a clean stop releases the
lease. The sends are read from the broker, where nothing consumes them: the default queue is a
Redis list ("celery", no task routes), newest first, and each message's `origin` header names
the sending process ("gen<pid>@host")."""

import json
import logging
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError

from apps.core.beat import LeasedScheduler
from apps.core.leases import Lease
from config.celery import app

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "celery"  # the default queue: config/settings.py routes no task elsewhere
CONTROL = "jobs.control_pass"
INTERVAL = 1  # TORUS_RECONCILE_SECONDS for the beats: the control pass every second
TTL = 5  # TORUS_BEAT_LEASE_SECONDS for the beats (a holder may stall up to ttl - 1 s)


@dataclass
class Sent:
    at: float  # time.monotonic() when the test saw it
    task: str
    pid: int  # of the beat that sent it


class Broker:
    """The default queue on the tests' broker database: what beat sent, in order."""

    def __init__(self) -> None:
        self.redis = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        self.seen = 0
        self.sent: list[Sent] = []

    def empty(self) -> None:
        self.redis.delete(QUEUE)
        self.seen = 0

    def poll(self) -> list[Sent]:
        new = self.redis.llen(QUEUE) - self.seen
        if new <= 0:
            return []
        now, fresh = time.monotonic(), []
        for raw in reversed(self.redis.lrange(QUEUE, 0, new - 1)):  # LPUSHed: newest first
            headers = json.loads(raw)["headers"]
            pid = int(re.match(r"gen(\d+)@", headers["origin"]).group(1))
            fresh.append(Sent(at=now, task=headers["task"], pid=pid))
        self.seen += new
        self.sent += fresh
        return fresh

    def watch(self, seconds: float) -> list[Sent]:
        """Everything sent in the next `seconds`."""
        got, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            got += self.poll()
            time.sleep(0.05)
        return got + self.poll()


def _holder_pid(lease: Lease) -> int | None:
    holder = lease.current_holder()  # beat@host:pid:random
    return int(holder.split(":")[-2]) if holder else None


def _beat(*, name: str, tmp_path: Path, env: dict) -> tuple[subprocess.Popen, Path]:
    log, schedule = tmp_path / f"{name}.log", tmp_path / f"{name}-schedule"
    command = [str(ROOT / ".venv/bin/celery"), "-A", "config", "beat", "--loglevel", "INFO"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, "--schedule", str(schedule)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log


def _until(condition, *, seconds: float, what: str, logs: list[Path]):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs if p.exists())
    raise AssertionError(f"{what} within {seconds} s\n{tails}")


def test_two_beats_send_as_one_and_the_standby_takes_over(tmp_path):
    broker = Broker()
    lease = Lease(name="beat", ttl=TTL, holder="test")  # to read the holder with
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "TORUS_REDIS_DB_BASE": str(settings.REDIS_DB_BASE),
        "TORUS_BEAT_LEASE_SECONDS": str(TTL),
        "TORUS_RECONCILE_SECONDS": str(INTERVAL),
    }
    broker.empty()
    lease._client().delete(lease.key)
    procs, logs = {}, []
    try:
        for name in ("beat-a", "beat-b"):
            proc, log = _beat(name=name, tmp_path=tmp_path, env=env)
            procs[proc.pid] = proc
            logs.append(log)

        # Both start; one takes the lease and sends the control pass.
        active = _until(
            lambda: _holder_pid(lease) if broker.poll() else None,
            seconds=60,
            what="no beat took the lease and sent",
            logs=logs,
        )
        assert active in procs, "the lease holder is one of the two beats"
        assert all(p.poll() is None for p in procs.values()), "both beats run"

        # One beat's rate (about window / INTERVAL), not two beats' (twice that, interleaved).
        # The lease may pass once meanwhile if the holder stalls past the ttl on a loaded
        # machine: then the senders change once, and the catch-up adds at most one send (and a
        # step of the wall clock, below, one more).
        window = 8
        sent = broker.watch(window)
        senders = [
            pid for i, pid in enumerate(s.pid for s in sent) if i == 0 or pid != sent[i - 1].pid
        ]
        assert len(senders) <= 2 and set(senders) <= set(procs), senders
        control = [s for s in sent if s.task == CONTROL]
        assert 2 <= len(control) <= window / INTERVAL + 3, [s.at for s in control]
        active = _holder_pid(lease)
        assert active in procs
        standby = next(pid for pid in procs if pid != active)

        # The active beat dies without a word: the standby takes over once the lease expires.
        procs[active].send_signal(signal.SIGKILL)
        procs[active].wait(timeout=30)
        killed_at = time.monotonic()
        resumed = _until(
            lambda: [s for s in broker.poll() if s.pid == standby],
            seconds=TTL + 30,
            what="the standby did not take over",
            logs=logs,
        )
        takeover = resumed[0].at - killed_at
        print(f"beat takeover: sends resumed {takeover:.1f} s after SIGKILL (ttl {TTL} s)")
        assert _holder_pid(lease) == standby

        # Catch-up: the standby's own schedule has missed a dozen periods of the control pass, and
        # sends it once, then at its interval: no burst (a dozen sends at once). Beat schedules
        # by the wall clock and the test reads the monotonic one: a step of the machine's clock
        # may add one send (a CI run saw two 50 ms apart, the cadence otherwise unchanged).
        sent = resumed + broker.watch(5)
        assert {s.pid for s in sent} == {standby}
        control = [s.at - resumed[0].at for s in sent if s.task == CONTROL]
        span = sent[-1].at - resumed[0].at
        assert 1 <= len(control) <= span / INTERVAL + 3, control
        assert max(sum(t <= at < t + INTERVAL / 2 for at in control) for t in control) <= 2, control

        # A clean stop gives the lease back at once (not by expiry).
        procs[standby].send_signal(signal.SIGTERM)
        assert procs[standby].wait(timeout=30) == 0
        assert lease.current_holder() is None
        assert "beat: lease released" in logs[list(procs).index(standby)].read_text()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
        broker.empty()
        lease._client().delete(lease.key)


@pytest.fixture
def scheduler(settings, tmp_path):
    settings.TORUS_BEAT_LEASE_SECONDS = TTL
    made = LeasedScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))
    yield made
    made.close()
    made.connection.close()


def _probe(scheduler: LeasedScheduler, name: str) -> None:
    """An entry whose time has passed, so the next active tick sends it."""
    past = scheduler.app.now() - timedelta(hours=2)
    scheduler.add(name=name, task=f"tests.{name}", schedule=3600.0, last_run_at=past)


def _ticks(scheduler: LeasedScheduler) -> float:
    """Tick as beat does until nothing more is due now; the sleep it then asks for."""
    for _ in range(20):
        sleep = scheduler.tick()
        if sleep > 0:
            return sleep
    raise AssertionError("beat kept sending")


def test_the_scheduler_sends_only_while_it_holds_the_lease(scheduler, caplog, monkeypatch):
    broker = Broker()
    broker.empty()
    other = Lease(name="beat", ttl=30, holder="other")
    caplog.set_level(logging.INFO, logger="apps.core.beat")
    try:
        _probe(scheduler, "probe")
        assert other.hold()
        assert 0 < scheduler.tick() <= 1  # standby: nothing sent, tries again soon
        assert broker.poll() == []
        assert "beat: standby (lease held by other)" in caplog.text

        other.release()
        assert 0 < _ticks(scheduler) <= TTL / 3  # active: sleeps at most a third of the ttl
        assert "tests.probe" in [s.task for s in broker.poll()]  # it was due: sent
        assert scheduler.lease.current_holder() == scheduler.lease.holder
        assert "beat: active" in caplog.text

        # Redis away: nothing is sent (no beat can tell it is alone), one warning per outage.
        _probe(scheduler, "probe2")
        caplog.clear()

        def unreachable() -> bool:
            raise RedisConnectionError("Connection refused")

        monkeypatch.setattr(scheduler.lease, "hold", unreachable)
        assert 0 < scheduler.tick() <= 1 and 0 < scheduler.tick() <= 1
        assert broker.poll() == []
        assert [r.getMessage()[:26] for r in caplog.records] == ["beat: cannot reach Redis ("]
        monkeypatch.undo()
        _ticks(scheduler)
        assert "tests.probe2" in [s.task for s in broker.poll()]
        assert "beat: active" in caplog.text

        scheduler.close()  # a clean stop gives the lease back
        assert scheduler.lease.current_holder() is None
    finally:
        other.release()
        broker.empty()


def test_the_beat_settings_name_the_leased_scheduler():
    assert app.conf.beat_scheduler == "apps.core.beat:LeasedScheduler"
    assert settings.TORUS_BEAT_LEASE_SECONDS >= 1
