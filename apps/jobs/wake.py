"""Asking the worker for jobs' passes and cancels, by task name (only tasks.py imports tasks)."""

from celery import current_app
from django.core.cache import cache


def wanted_key(cluster_id) -> str:
    return f"torus:dispatch-wanted:{cluster_id}"


def request_dispatch(cluster_id) -> None:
    """Ask for a dispatch of a cluster; a request already waiting covers this one too, so
    500 admissions make one task, not 500."""
    if cache.add(wanted_key(cluster_id), "1", timeout=30):
        current_app.send_task("jobs.dispatch_cluster", args=[str(cluster_id)])


def request_cancel(job_id) -> None:
    """Ask the worker to tell the backend that a job is cancelled (jobs.cancel_backend_jobs)."""
    current_app.send_task("jobs.cancel_backend_jobs", args=[str(job_id)])
