"""Requests for the deployments' cells of the role matrix (tests/tenancy/test_role_matrix.py)."""

import tempfile
from functools import cache
from pathlib import Path

from django.urls import reverse

from apps.serving.models import Deployment
from apps.tenancy.models import Role
from tests.registry.conftest import _make_area
from tests.serving.conftest import make_tiny_model, register_gguf

SMALL = ("--layers", "1", "--hidden", "64", "--heads", "2", "--kv-heads", "1", "--ff", "128")


@cache
def _small_gguf() -> Path:
    """A one-layer model (the matrix only needs a version the runtime can serve), made once."""
    return make_tiny_model(Path(tempfile.mkdtemp()) / "small.gguf", *SMALL)


def request_serving(world, role, resource, action):
    """(deployment, action) as `role`, on a deployment of the project's member."""
    _make_area(world.project)
    if not Deployment.objects.filter(project=world.project).exists():
        register_gguf(world, _small_gguf(), name="small")
        made = world.client(Role.MEMBER).post(
            reverse("deployment-list"),
            {"project": str(world.project.pk), "name": "base", "model": "small@production"},
            format="json",
        )
        assert made.status_code == 201, made.content
    deployment = Deployment.objects.get(project=world.project, name="base")
    client = world.client(role)
    detail = reverse("deployment-detail", args=[deployment.pk])
    return {
        "read": lambda: client.get(detail),
        "create": lambda: client.post(
            reverse("deployment-list"),
            {"project": str(world.project.pk), "name": f"new-{role}", "model": "small:1"},
            format="json",
        ),
        "update": lambda: client.patch(detail, {"max_tokens": 64}, format="json"),
        "delete": lambda: client.delete(detail),
        "keys": lambda: client.post(f"{detail}keys/", {"name": "k"}, format="json"),
    }[action]()
