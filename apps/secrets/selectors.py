"""Reads of project secrets: names and versions only; nothing here returns a value."""

from django.http import Http404

from apps.core.actor import Actor
from apps.secrets.models import ProjectSecret
from apps.tenancy.models import Project


def project_for(*, actor: Actor, project_id) -> Project:
    """A project among the actor's tenants (another tenant's, or none: 404)."""
    project = (
        Project.objects.visible_to(actor).select_related("tenant").filter(pk=project_id).first()
    )
    if project is None:
        raise Http404("Project not found.")
    return project


def secret_list(*, project: Project):
    """The project's secrets, without their ciphertext."""
    return (
        ProjectSecret.objects.filter(project=project)
        .select_related("updated_by")
        .defer("ciphertext")
    )


def secret_get(*, project: Project, name: str) -> ProjectSecret:
    secret = ProjectSecret.objects.select_related("project").filter(project=project, name=name)
    found = secret.first()
    if found is None:
        raise Http404("Secret not found.")
    return found
