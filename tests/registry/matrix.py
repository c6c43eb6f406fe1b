"""Requests for the registry's cells of the role matrix (tests/tenancy/test_role_matrix.py)."""

from django.test import override_settings

from apps.registry.models import Webhook
from apps.tenancy.models import Role
from tests.registry.conftest import _make_area

BASE = "/api/v1/models/"


def _ready_model(world) -> dict:
    """A model with one ready version (made by the tenant's owner)."""
    _make_area(world.project)
    owner = world.client(Role.OWNER)
    model = owner.post(BASE, {"project": str(world.project.pk), "name": "m"}, format="json")
    model = model.json()
    owner.post(f"{BASE}{model['id']}/versions/", {}, format="json")
    owner.put(
        f"{BASE}{model['id']}/versions/1/files/w.bin/?offset=0",
        data=b"w",
        content_type="application/octet-stream",
    )
    owner.post(f"{BASE}{model['id']}/versions/1/commit/")
    return model


def request_registry(world, role, resource, action):
    client = world.client(role)
    if resource == "lineage":
        from apps.datasets.models import Dataset, DatasetVersion

        dataset = Dataset.objects.create(tenant=world.tenant, project=world.project, name="d")
        dv = DatasetVersion.objects.create(dataset=dataset, number=1, state="committed")
        return client.get(f"/api/v1/lineage/dataset-versions/{dv.pk}")
    if resource == "webhook":
        hook = Webhook.objects.create(
            tenant=world.tenant, url="http://127.0.0.1:9/h", events=["alias.changed"], secret="s"
        )
        url = f"/api/v1/webhooks/{hook.pk}/"
        with override_settings(TORUS_WEBHOOK_ALLOW_PRIVATE=True):
            return {
                "read": lambda: client.get(url),
                "create": lambda: client.post(
                    "/api/v1/webhooks/",
                    {"url": "http://127.0.0.1:9/new", "events": ["model_version.created"]},
                    format="json",
                ),
                "update": lambda: client.patch(url, {"active": False}, format="json"),
                "delete": lambda: client.delete(url),
            }[action]()
    if action == "create":
        return client.post(BASE, {"project": str(world.project.pk), "name": "new"}, format="json")
    model = _ready_model(world)
    url = f"{BASE}{model['id']}/"
    return {
        "read": lambda: client.get(url),
        "download": lambda: client.get(f"{url}versions/1/files/w.bin/"),
        "create-version": lambda: client.post(f"{url}versions/", {}, format="json"),
        "update": lambda: client.patch(url, {"description": "d"}, format="json"),
        "alias": lambda: client.put(f"{url}aliases/production/", {"version": 1}, format="json"),
        "stage": lambda: client.post(f"{url}versions/1/stage/", {"stage": "staging"}),
        # a model with versions is archived, never deleted: the right to delete, on a bare one
        "delete": lambda: client.delete(f"{BASE}{_bare(world)['id']}/"),
    }[action]()


def _bare(world) -> dict:
    body = {"project": str(world.project.pk), "name": "bare"}
    return world.client(Role.OWNER).post(BASE, body, format="json").json()
