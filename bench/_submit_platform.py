"""bench/submit.py's platform side: Django in this process, the worker, locks, results."""

import contextlib
import os
import socket
import time
from pathlib import Path

from _submit_slurm import log, scancel, wait_gone

from scripts.devstack import Proc, worker_command

# -- Django (in this process: setup, polling, reconcile passes, cleanup) ---------------------


def reconcile_pass(cluster_id) -> tuple[dict, float]:
    from apps.jobs.reconcile import reconcile_cluster

    started = time.perf_counter()
    stats = reconcile_cluster(cluster_id=cluster_id)
    return stats, time.perf_counter() - started


def active_bench_jobs(project):
    from apps.jobs.models import Job
    from apps.jobs.states import TERMINAL

    return Job.objects.filter(project=project).exclude(state__in=list(TERMINAL))


def finish_torus_jobs(ctx, job_ids=None) -> None:
    """scancel the bench tenant's Slurm jobs and bring every bench job to a terminal state."""
    from apps.core.exceptions import Conflict
    from apps.jobs.models import JobAttempt
    from apps.jobs.services import job_cancel
    from apps.tenancy.access import actor_for_user

    project, cluster = ctx["project"], ctx["cluster"]
    attempts = JobAttempt.objects.filter(job__project=project).exclude(backend_id="")
    if job_ids is not None:
        attempts = attempts.filter(job_id__in=job_ids)
    else:
        attempts = attempts.filter(job__in=active_bench_jobs(project))
    ids = list(attempts.values_list("backend_id", flat=True))
    scancel(ids)
    wait_gone(ids)
    for _ in range(4):
        if not active_bench_jobs(project).exists():
            return
        reconcile_pass(cluster.pk)
    actor = actor_for_user(user=ctx["user"])
    left = list(active_bench_jobs(project))
    for job in left:
        with contextlib.suppress(Conflict):
            job_cancel(actor=actor, job=job)
    if left:
        time.sleep(1.0)
        reconcile_pass(cluster.pk)
    still = active_bench_jobs(project).count()
    if still:
        log(f"warning: {still} bench jobs not terminal yet (their cancel is on its way)")


# -- the platform's processes ---------------------------------------------------------------


def start_worker(logdir: Path) -> Proc:
    from config.celery import app

    hostname = f"bench-submit-{os.getpid()}@{socket.gethostname()}"
    app.control.purge()  # tasks a killed earlier run left in our own broker database
    argv = worker_command(hostname=hostname, loglevel="INFO", queues="celery")
    proc = Proc("worker", argv, logdir)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"celery worker exited:\n{proc.tail()}")
        if app.control.ping(destination=[hostname], timeout=1.0):
            log(f"celery worker {hostname} answers ping")
            return proc
    raise RuntimeError(f"celery worker did not answer a ping:\n{proc.tail()}")


def drop_task_results() -> None:
    """Our workers' Celery results (kept a day by default) in our own Redis database."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.CELERY_RESULT_BACKEND)
    keys = list(client.scan_iter("celery-task-meta-*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])


def clear_locks(cluster_id) -> None:
    from django.core.cache import cache

    for kind in ("dispatch", "reconcile"):
        cache.delete(f"torus:lock:{kind}:{cluster_id}")
