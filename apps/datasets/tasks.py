"""Celery tasks of datasets (run by the worker, as torus)."""

from celery import shared_task

from apps.identity.services import group_ensure
from apps.identity.storage import project_tree_ensure
from apps.tenancy.models import Project


@shared_task(name="datasets.project_storage_ensure")
def project_storage_ensure(project_id: str) -> str:
    """Make the project's groups and tree, with its datasets/ and models/ directories owned by
    the platform account (apps/identity/storage.py, the one place the tree is made). The web
    process, unprivileged, asks for it and waits. Safe to run twice."""
    project = Project.objects.select_related("tenant").get(pk=project_id)
    tenant_group = group_ensure(tenant=project.tenant)
    project_group = group_ensure(tenant=project.tenant, project=project)
    path = project_tree_ensure(
        project=project, tenant_gid=tenant_group.gid, project_gid=project_group.gid
    )
    return str(path)
