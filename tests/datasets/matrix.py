"""Requests for the datasets' cells of the role matrix (tests/tenancy/test_role_matrix.py)."""

from django.urls import reverse

from apps.datasets.tasks import project_storage_ensure
from apps.tenancy.models import Role


def request_datasets(world, role, resource, action):
    """(dataset, action) as `role`, on a dataset with an open version holding one file (made
    by the tenant's owner)."""
    project_storage_ensure(str(world.project.pk))
    owner = world.client(Role.OWNER)
    dataset = owner.post(
        reverse("dataset-list"), {"project": str(world.project.pk), "name": "d"}, format="json"
    ).json()
    versions = reverse("dataset-version-list", kwargs={"dataset_pk": dataset["id"]})
    owner.post(versions, {}, format="json")
    kwargs = {"dataset_pk": dataset["id"], "number": 1}
    upload = reverse("dataset-version-upload", kwargs=kwargs)
    owner.generic(
        "PUT", f"{upload}?path=f&offset=0&total=1", b"f", content_type="application/octet-stream"
    )
    client = world.client(role)
    detail = reverse("dataset-detail", kwargs={"pk": dataset["id"]})
    return {
        "read": lambda: client.get(detail),
        "create": lambda: client.post(
            reverse("dataset-list"),
            {"project": str(world.project.pk), "name": "new"},
            format="json",
        ),
        "upload": lambda: client.generic(
            "PUT", f"{upload}?path=g&offset=0&total=1", b"g", content_type="application/x"
        ),
        "commit": lambda: client.post(reverse("dataset-version-commit", kwargs=kwargs)),
        "update": lambda: client.patch(detail, {"description": "new"}, format="json"),
        # a dataset with versions is archived, never deleted: the right to delete, on a bare one
        "delete": lambda: client.delete(
            reverse("dataset-detail", kwargs={"pk": _bare(world, owner)["id"]})
        ),
    }[action]()


def _bare(world, owner) -> dict:
    body = {"project": str(world.project.pk), "name": "bare"}
    return owner.post(reverse("dataset-list"), body, format="json").json()
