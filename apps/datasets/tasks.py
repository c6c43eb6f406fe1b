"""Celery tasks of datasets (run by the worker, as torus)."""

from celery import shared_task

from apps.datasets.areas import ENSURE_TASK, project_tree_make


@shared_task(name=ENSURE_TASK)
def project_storage_ensure(project_id: str) -> str:
    """Make the project's groups and tree (apps/datasets/areas.py). The web process,
    unprivileged, asks for it and waits. Safe to run twice."""
    return project_tree_make(project_id=project_id)
