"""bench/ingest.py's Torus side: the log shipper, its attempts, started and timed."""

import time
import uuid
from datetime import timedelta
from pathlib import Path

from _common import ENV, process_cpu_seconds, pyspy_stop
from _ingest_cpu import _pids_with, cmdline, services_cpu, services_delta
from _ingest_data import MARKER, NODE, TENANT_SLUG, log
from _ingest_es import delete_indices, es_count, es_settle
from _ingest_report import _figures, _summary, wait_count

from scripts.devstack import Proc, shipper_command

# -- Torus ----------------------------------------------------------------------------------------


def shipper_window() -> tuple[int, int]:
    """(hours the platform's shippers look back, hours ours looks back).

    The bench attempts are dated just outside the platform's window and inside ours, so a
    platform shipper running on this machine (make up) never ships them beside ours."""
    from django.conf import settings

    platform_hours = settings.TORUS_SHIPPER_RECENT_HOURS
    return platform_hours, platform_hours + 2


def shipper_settings() -> dict:
    from django.conf import settings

    names = ["INTERVAL", "READ_BYTES", "READS_PER_PASS", "BULK_DOCS"]
    return {name.lower(): getattr(settings, f"TORUS_SHIPPER_{name}", None) for name in names}


def backlog(hours: int) -> int:
    """Ended attempts in the window that the shipper has not finished with yet (the same
    test as its own: JobAttempt.logs_shipped)."""
    from django.utils import timezone

    from apps.jobs.models import ATTEMPT_ENDED, JobAttempt

    recent = timezone.now() - timedelta(hours=hours)
    return (
        JobAttempt.objects.filter(logs_shipped=False, created_at__gte=recent)
        .filter(state__in=list(ATTEMPT_ENDED))
        .exclude(stdout_path="")
        .count()
    )


def other_shippers() -> list[int]:
    """`manage.py run_shipper` processes that this script did not start."""
    found = []
    for pid in _pids_with("run_shipper"):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if "run_shipper" in cmdline(pid) and f"{MARKER}=".encode() not in environ:
            found.append(pid)
    return found


def start_shipper(label: str, logdir: Path, hours: int) -> Proc:
    env = {**ENV, "TORUS_SHIPPER_RECENT_HOURS": str(hours), MARKER: "1"}
    return Proc(label, shipper_command(), logdir, env=env)


def wait_idle(proc: Proc, hours: int, label: str, timeout: float = 1800.0) -> dict:
    """Until the shipper has started (Django loaded, template installed) and shipped every
    ended attempt in its window; then its idle CPU rate over 3 s."""
    deadline = time.monotonic() + timeout
    said = 0.0
    while True:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"the shipper exited:\n{proc.tail()}")
        left = backlog(hours)
        if left == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{label}: {left} attempts still not shipped after {timeout:.0f} s")
        if time.monotonic() - said > 15:
            log(f"{label}: the shipper is catching up with {left} other attempts first")
            said = time.monotonic()
        time.sleep(1.0)
    time.sleep(1.5)  # at least one more (idle) pass
    cpu0, t0 = process_cpu_seconds(proc.popen.pid), time.perf_counter()
    time.sleep(3.0)
    cpu1, t1 = process_cpu_seconds(proc.popen.pid), time.perf_counter()
    return {"startup_cpu_s": round(cpu0, 2), "idle_cpu_per_s": round((cpu1 - cpu0) / (t1 - t0), 4)}


def make_attempts(ctx, paths, empty: Path, job_id: str, attempt_ids: list[str], hours: int):
    """One ended job with an attempt per file (stdout = the file, stderr = empty), dated
    `hours` ago. Committed when this returns."""
    from django.db import transaction
    from django.utils import timezone

    from apps.jobs.models import AttemptState, Job, JobAttempt
    from apps.jobs.spec import JobSpecSerializer, normalise, totals

    data = {
        "project": str(ctx["project"].pk),
        "name": "bench-ingest",
        "command": ["python", "train.py"],
        "resources": {"gpus_per_node": 0, "nodes": len(paths)},
    }
    serializer = JobSpecSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    spec = normalise(dict(serializer.validated_data))
    when = timezone.now() - timedelta(hours=hours)
    with transaction.atomic():
        job = Job.objects.create(
            id=uuid.UUID(job_id),
            tenant=ctx["tenant"],
            project=ctx["project"],
            user=ctx["user"],
            name=spec["name"],
            spec=spec,
            state="SUCCEEDED",
            cluster=ctx["cluster"],
            priority=spec["priority"],
            labels=spec["labels"],
            started_at=when,
            finished_at=when,
            exit_code=0,
            **totals(spec),
        )
        JobAttempt.objects.bulk_create(
            [
                JobAttempt(
                    id=uuid.UUID(attempt_id),
                    job=job,
                    number=i + 1,
                    state=AttemptState.SUCCEEDED,
                    nodes=[NODE],
                    stdout_path=str(path),
                    stderr_path=str(empty),
                    started_at=when,
                    ended_at=when,
                    exit_code=0,
                )
                for i, (path, attempt_id) in enumerate(zip(paths, attempt_ids, strict=True))
            ]
        )
        # auto_now_add wins on create: date them afterwards, in the same transaction
        Job.objects.filter(pk=job.pk).update(created_at=when)
        JobAttempt.objects.filter(job=job).update(created_at=when)
    return job


def torus_phase(label, ctx, paths, empty, job_id, attempts, n, logdir, hours, spy=None) -> dict:
    from apps.logs.models import JobMetric

    platform_hours, ours = hours
    delete_indices(f"torus-logs-{TENANT_SLUG}-*")
    es_settle()
    proc = start_shipper(label, logdir, ours)
    sampler = None
    try:
        idle = wait_idle(proc, ours, label)
        log(
            f"{label}: shipper idle (startup {idle['startup_cpu_s']} CPU-s, idle "
            f"{idle['idle_cpu_per_s'] * 100:.1f} % of a core); creating the attempts"
        )
        if spy:
            sampler = spy(proc.popen.pid)
        svc0, cpu0 = services_cpu(), process_cpu_seconds(proc.popen.pid)
        started = time.perf_counter()
        job = make_attempts(ctx, paths, empty, job_id, attempts, platform_hours + 1)
        seconds = wait_count(proc, f"torus-logs-{TENANT_SLUG}-*", str(job.pk), n, started, label)
        cpu = process_cpu_seconds(proc.popen.pid) - cpu0
        services = services_delta(svc0)
        cursors = _wait_cursors(job, len(paths))
        cursor_s = time.perf_counter() - started
    finally:
        if sampler is not None:
            pyspy_stop(sampler)
        proc.stop()
    result = _figures(n, seconds, cpu, services)
    result.update(idle)
    result["net_of_idle_cpu_s"] = round(cpu - idle["idle_cpu_per_s"] * seconds, 2)
    result["cursors_complete_after_s"] = round(cursor_s, 2)
    result["cursor_lines"] = sum(c.lines for c in cursors)
    result["complete_streams"] = sum(1 for c in cursors if c.complete)
    result["metric_points"] = JobMetric.objects.filter(job=job).count()
    result["count_after_stop"] = es_count(f"torus-logs-{TENANT_SLUG}-*", str(job.pk))
    result["job"] = str(job.pk)
    if result["cursor_lines"] != n:
        log(f"warning: the cursors count {result['cursor_lines']} lines, not {n}")
    log(f"{label}: {_summary(result)}")
    return result


def _wait_cursors(job, files: int, timeout: float = 30.0) -> list:
    from apps.logs.models import LogCursor

    deadline = time.monotonic() + timeout
    while True:
        cursors = list(LogCursor.objects.filter(attempt__job=job))
        if len(cursors) == 2 * files and all(c.complete for c in cursors):
            return cursors
        if time.monotonic() > deadline:
            return cursors
        time.sleep(0.1)


def drop_bench_jobs(ctx) -> int:
    from apps.jobs.models import Job

    deleted, _ = Job.objects.filter(project=ctx["project"]).delete()
    return deleted
