"""A project's storage areas in its tree (datasets/ and models/): made by the worker through
the privileged helper (apps/identity/storage.py, the one place the tree is made), asked for
by the web process, which sends the task by name and waits."""

from django.conf import settings

from apps.datasets.errors import StorageUnavailable
from apps.identity.services import group_ensure
from apps.identity.storage import project_root, project_tree_ensure
from apps.tenancy.models import Project

ENSURE_TASK = "datasets.project_storage_ensure"  # apps/datasets/tasks.py


def project_tree_make(*, project_id: str) -> str:
    """Make the project's groups and tree, with its datasets/ and models/ directories owned by
    the platform account; in the worker. Safe to run twice. Returns the tree's path."""
    project = Project.objects.select_related("tenant").get(pk=project_id)
    tenant_group = group_ensure(tenant=project.tenant)
    project_group = group_ensure(tenant=project.tenant, project=project)
    path = project_tree_ensure(
        project=project, tenant_gid=tenant_group.gid, project_gid=project_group.gid
    )
    return str(path)


def project_storage_ensure(*, project: Project) -> None:
    """The project's datasets/ directory in its tree, made by a worker through the privileged
    helper when missing; StorageUnavailable when no worker answers in time."""
    if (project_root(project) / "datasets").is_dir():
        return
    from celery import current_app
    from celery.exceptions import TimeoutError as CeleryTimeout

    result = current_app.send_task(ENSURE_TASK, args=[str(project.pk)])
    try:
        result.get(timeout=settings.TORUS_STORAGE_ENSURE_TIMEOUT, propagate=True)
    except CeleryTimeout as exc:
        raise StorageUnavailable("no worker made the project's storage in time") from exc
    except Exception as exc:  # the worker failed (directory unreachable, filesystem)
        raise StorageUnavailable(f"the worker could not make the project's storage: {exc}") from exc
    finally:
        result.forget()
