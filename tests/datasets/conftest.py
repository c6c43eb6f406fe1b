"""Fixtures for datasets: a project whose storage is made as the root worker makes it, and
helpers that drive the API."""

import hashlib

import pytest
from django.urls import reverse

from apps.datasets.tasks import project_storage_ensure
from apps.tenancy.models import Role


@pytest.fixture
def acme_storage(acme):
    """acme's project tree with datasets/ and models/ (the task the worker runs, run here)."""
    project_storage_ensure(str(acme.project.pk))
    return acme


def create_dataset(client, project, name="images", **extra) -> dict:
    response = client.post(
        reverse("dataset-list"), {"project": str(project.pk), "name": name, **extra}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def open_version(client, dataset_id) -> dict:
    response = client.post(
        reverse("dataset-version-list", kwargs={"dataset_pk": dataset_id}), {}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def version_url(name: str, dataset_id, number: int) -> str:
    return reverse(f"dataset-version-{name}", kwargs={"dataset_pk": dataset_id, "number": number})


def put_chunk(client, dataset_id, number, path, data: bytes, *, offset: int, total: int):
    return client.generic(
        "PUT",
        version_url("upload", dataset_id, number) + f"?path={path}&offset={offset}&total={total}",
        data,
        content_type="application/octet-stream",
    )


def upload(client, dataset_id, number, path, data: bytes, *, chunk: int = 1 << 16) -> dict:
    offset, body = 0, None
    while True:
        piece = data[offset : offset + chunk]
        response = put_chunk(
            client, dataset_id, number, path, piece, offset=offset, total=len(data)
        )
        assert response.status_code == 200, response.content
        body = response.json()
        offset = body["offset"]
        if body["complete"]:
            return body


def commit(client, dataset_id, number):
    return client.post(version_url("commit", dataset_id, number))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def member(world):
    return world.client(Role.MEMBER)
