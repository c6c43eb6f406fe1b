#!/usr/bin/env python3
"""Notifications under a burst (issue 36): N jobs (default 1,000) of N/10 people end within a
minute; each person is subscribed by e-mail to their own jobs. The state changes are
committed here as the control pass commits them (the announcer runs after each commit); a real
Celery worker sends the messages to a real SMTP server (aiosmtpd, a process of its own).

Reported: whether every message arrived (exactly one per job), the latency from the state
change's commit to the SMTP server's receipt (p50, p95, max; the aim is p95 under 10 s), the
messages per second, and CPU per message by process (the worker, this process's announcer,
PostgreSQL, the SMTP server). The peer, in the same run: the same messages sent straight with
smtplib, one connection each, from one process (the transport's floor).

    .venv/bin/python bench/notify.py [--jobs 1000] [--seconds 60] [--keep-logs]
"""

import argparse
import email.message
import os
import smtplib
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BIN, cpu_parts, django_setup, ensure_tenant, finish, log, percentiles

from scripts.devstack import Proc, free_port, stop_all, worker_command

NAME = "notify"


def smtp_server(logdir: Path) -> tuple[Proc, int, Path]:
    port, maildir = free_port(), logdir / "maildir"
    argv = [BIN / "python", "-m", "aiosmtpd", "-n", "-l", f"127.0.0.1:{port}",
            "-c", "aiosmtpd.handlers.Mailbox", maildir]  # fmt: skip
    proc = Proc("smtp", ["/usr/bin/env", *map(str, argv)], logdir)  # as root: not a platform one
    deadline = time.monotonic() + 20
    while not (maildir / "new").exists():
        assert proc.popen.poll() is None and time.monotonic() < deadline, proc.tail()
        time.sleep(0.1)
    return proc, port, maildir


def start_worker(logdir: Path, *, port: int) -> Proc:
    from config.celery import app

    hostname = f"bench-notify-{os.getpid()}@localhost"
    app.control.purge()
    env = {
        **os.environ,
        "TORUS_EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "TORUS_EMAIL_HOST": "127.0.0.1",
        "TORUS_EMAIL_PORT": str(port),
    }
    proc = Proc("worker", worker_command(hostname=hostname, loglevel="INFO"), logdir, env=env)
    deadline = time.monotonic() + 90
    while not app.control.ping(destination=[hostname], timeout=1.0):
        assert proc.popen.poll() is None and time.monotonic() < deadline, proc.tail()
    return proc


def people_and_jobs(ctx, *, jobs: int) -> list:
    """N/10 people, each subscribed by e-mail to their own jobs, and their RUNNING jobs."""
    from django.contrib.auth import get_user_model

    from apps.jobs.models import Job
    from apps.notifications.models import Subscription
    from apps.tenancy.models import Membership, Role

    run = uuid.uuid4().hex[:6]
    made = []
    for i in range(max(1, jobs // 10)):
        user = get_user_model().objects.create(username=f"bench-notify-{run}-{i}")
        Membership.objects.create(tenant=ctx["tenant"], user=user, role=Role.MEMBER)
        Subscription.objects.create(
            tenant=ctx["tenant"], user=user, events=["succeeded"], channel="email",
            address=f"{user.username}@example.org",
        )  # fmt: skip
        made.append(user)
    rows = [
        Job(tenant=ctx["tenant"], project=ctx["project"], user=made[i % len(made)],
            name=f"n{i}", spec={"name": f"n{i}"}, state="RUNNING")
        for i in range(jobs)
    ]  # fmt: skip
    return Job.objects.bulk_create(rows)


def end_within(jobs: list, *, seconds: float) -> None:
    """Each job SUCCEEDED, spread evenly over `seconds`, each change committed on its own."""
    from django.db import transaction

    from apps.jobs.models import Job
    from apps.jobs.transitions import job_transition

    started = time.monotonic()
    for i, job in enumerate(jobs):
        time.sleep(max(0.0, started + seconds * i / len(jobs) - time.monotonic()))
        with transaction.atomic():
            locked = Job.objects.select_for_update().get(pk=job.pk)
            job_transition(job=locked, to="SUCCEEDED", reason="exit code 0")


def received(maildir: Path) -> dict[str, float]:
    """{notification key: when the SMTP server wrote it (its file's time)}."""
    found = {}
    for path in (maildir / "new").iterdir():
        with path.open("rb") as file:
            key = email.message_from_binary_file(file)["X-Torus-Notification"]
        found[key] = path.stat().st_mtime
    return found


def peer_smtplib(port: int, *, count: int, body: str) -> dict:
    started = time.perf_counter()
    each = []
    for i in range(count):
        t = time.perf_counter()
        message = email.message.EmailMessage()
        message["Subject"], message["From"] = "Torus: job n succeeded", "torus@localhost"
        message["To"], message["X-Torus-Notification"] = f"peer{i}@example.org", f"peer-{i}"
        message.set_content(body)
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
            smtp.send_message(message)
        each.append((time.perf_counter() - t) * 1000)
    wall = time.perf_counter() - started
    return {"messages_per_second": round(count / wall, 1), "send_ms": percentiles(each)}


def cleanup(ctx) -> None:
    from django.contrib.auth import get_user_model

    from apps.jobs.models import Job
    from apps.notifications.models import Subscription

    Subscription.objects.filter(tenant=ctx["tenant"]).delete()  # and their notifications
    Job.objects.filter(project=ctx["project"]).delete()
    get_user_model().objects.filter(username__startswith="bench-notify-").delete()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0, help="the jobs end within this")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args()
    django_setup()
    from apps.notifications.models import Notification

    logdir = Path(tempfile.mkdtemp(prefix="bench-notify-"))
    ctx = ensure_tenant(slug="bench-notify", project_slug="jobs", owner="bench-notify-owner",
                        token_name="bench")  # fmt: skip
    cleanup(ctx)
    result = None
    try:
        smtp, port, maildir = smtp_server(logdir)
        worker = start_worker(logdir, port=port)
        jobs = people_and_jobs(ctx, jobs=args.jobs)
        log(NAME, f"{len(jobs)} jobs of {len(jobs) // 10} people end within {args.seconds:.0f} s")
        roots = {"worker": worker.pid, "smtp": smtp.pid}
        before = cpu_parts(roots, {"postgres": ("postgres",)})
        began = time.monotonic()
        end_within(jobs, seconds=args.seconds)
        deadline = time.monotonic() + 120
        while len(received(maildir)) < len(jobs) and time.monotonic() < deadline:
            time.sleep(0.5)
        after = cpu_parts(roots, {"postgres": ("postgres",)})
        wall = time.monotonic() - began
        got = received(maildir)
        sent = {n.key: n for n in Notification.objects.filter(subscription__tenant=ctx["tenant"])}
        latencies = [
            (got[key] - datetime.fromisoformat(n.items[0]["at"]).timestamp()) * 1000
            for key, n in sent.items()
            if key in got
        ]
        peer = peer_smtplib(port, count=min(len(jobs), 200), body="x" * 200)
        result = {
            "benchmark": NAME,
            "jobs": len(jobs),
            "end_within_seconds": args.seconds,
            "metrics": {
                "messages": len(sent),
                "delivered": len(set(got) & set(sent)),
                "one_per_job": len(sent) == len(jobs) == len(got),
                "event_to_delivery_ms": percentiles(latencies),
                "messages_per_second": round(len(got) / wall, 1),
                "cpu_ms_per_message": {
                    k: round((after[k] - before[k]) * 1000 / max(1, len(got)), 2)
                    for k in ("worker", "bench", "postgres", "smtp", "machine")
                },
            },
            "peers": {"smtplib": peer},
            "ratios": {
                "torus_vs_smtplib_send_p50": round(
                    percentiles(latencies).get("p50", 0) / max(peer["send_ms"]["p50"], 1e-9), 1
                )
            },
        }
        log(NAME, f"delivered {result['metrics']['delivered']} of {len(jobs)}; "
                  f"p95 {result['metrics']['event_to_delivery_ms'].get('p95')} ms")  # fmt: skip
    finally:
        stop_all()
        cleanup(ctx)
    return finish(NAME, result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        sys.exit(f"{NAME}: {exc}")
