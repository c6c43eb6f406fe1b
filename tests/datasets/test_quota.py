"""The storage quota, per tenant and per project, in bytes: checked when a chunk arrives
(refused with a clear code, nothing stored) and at commit; shown in usage."""

from django.urls import reverse

from apps.quotas.models import Quota
from apps.tenancy.models import Role
from tests.datasets.conftest import commit, create_dataset, member, open_version, put_chunk
from tests.factories import ProjectFactory, ProjectMemberFactory


def test_a_project_quota_refuses_the_chunk_that_would_pass_it(acme_storage):
    Quota.objects.create(
        tenant=acme_storage.tenant, project=acme_storage.project, storage_bytes=1000
    )
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    first = put_chunk(client, dataset["id"], 1, "a", b"a" * 600, offset=0, total=600)
    assert first.status_code == 200 and first.json()["complete"]
    refused = put_chunk(client, dataset["id"], 1, "b", b"b" * 500, offset=0, total=500)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "storage_quota_exceeded"
    assert "600 of 1000" in error["message"]
    state = client.get(
        reverse("dataset-version-upload", kwargs={"dataset_pk": dataset["id"], "number": 1}),
        {"path": "b"},
    ).json()
    assert state["offset"] == 0
    fits = put_chunk(client, dataset["id"], 1, "b", b"b" * 400, offset=0, total=400)
    assert fits.status_code == 200


def test_the_tenant_quota_counts_every_project(acme_storage):
    from apps.datasets.tasks import project_storage_ensure

    Quota.objects.create(tenant=acme_storage.tenant, storage_bytes=100)
    other = ProjectFactory(tenant=acme_storage.tenant, slug="second")
    ProjectMemberFactory(project=other, user=acme_storage.users[Role.MEMBER])
    project_storage_ensure(str(other.pk))
    client = member(acme_storage)
    one = create_dataset(client, acme_storage.project, name="one")
    two = create_dataset(client, other, name="two")
    open_version(client, one["id"])
    open_version(client, two["id"])
    assert put_chunk(client, one["id"], 1, "f", b"x" * 80, offset=0, total=80).status_code == 200
    refused = put_chunk(client, two["id"], 1, "f", b"x" * 30, offset=0, total=30)
    assert refused.json()["error"]["code"] == "storage_quota_exceeded"
    assert "tenant" in refused.json()["error"]["message"]


def test_commit_checks_the_quota_again_and_usage_shows_storage(acme_storage):
    client = member(acme_storage)
    dataset = create_dataset(client, acme_storage.project)
    open_version(client, dataset["id"])
    put_chunk(client, dataset["id"], 1, "f", b"x" * 500, offset=0, total=500)
    admin = acme_storage.client(Role.ADMIN)
    response = admin.post(
        reverse("quota-list"),
        {"project": str(acme_storage.project.pk), "storage_bytes": 400},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["storage_bytes"] == 400
    refused = commit(client, dataset["id"], 1)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "storage_quota_exceeded"

    storage = client.get(reverse("usage")).json()["storage"]
    assert {"tenant": "acme", "project": None, "used_bytes": 500, "limit_bytes": None} in storage
    assert {
        "tenant": "acme",
        "project": "acme-proj",
        "used_bytes": 500,
        "limit_bytes": 400,
    } in storage
    quota = acme_storage.tenant.quotas.get()
    admin.patch(reverse("quota-detail", args=[quota.pk]), {"storage_bytes": 500}, format="json")
    assert commit(client, dataset["id"], 1).status_code == 200
