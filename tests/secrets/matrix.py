"""Requests for the secrets' cells of the role matrix (tests/tenancy/test_role_matrix.py)."""

from django.urls import reverse

from apps.secrets.models import ProjectSecret
from apps.secrets.services import secret_set
from apps.tenancy.access import actor_for_user
from apps.tenancy.models import Role


def request_secrets(world, role, resource, action):
    """(secret, action) as `role` in the project, on a secret its member set."""
    if not ProjectSecret.objects.filter(project=world.project, name="HF_TOKEN").exists():
        secret_set(
            actor=actor_for_user(user=world.users[Role.MEMBER]),
            project=world.project,
            name="HF_TOKEN",
            value="hf_matrix_value",
        )
    client = world.client(role)
    pk = world.project.pk
    return {
        "read": lambda: client.get(reverse("project-secret-list", kwargs={"pk": pk})),
        "update": lambda: client.put(
            reverse("project-secret-detail", kwargs={"pk": pk, "name": "HF_TOKEN"}),
            {"value": "hf_new_value"},
            format="json",
        ),
        "delete": lambda: client.delete(
            reverse("project-secret-detail", kwargs={"pk": pk, "name": "HF_TOKEN"})
        ),
    }[action]()
