"""A JSON body's values keep their JSON types: no coercion of 0 to "0" or of "5" to 5, and
nothing written when a value has the wrong type; query strings are still read as strings."""

import pytest
from django.urls import reverse

from apps.quotas.models import Quota
from apps.tenancy.models import Role


def _quota(world, **limits):
    client = world.client(Role.ADMIN)
    body = {"tenant": str(world.tenant.id), "project": str(world.project.id), **limits}
    response = client.post(reverse("quota-list"), body, format="json")
    assert response.status_code == 201, response.content
    return client, response.json()["id"]


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"gpus": "4"}, "gpus", "Expected a number, got a string."),
        ({"gpus": True}, "gpus", "Expected a number, got a boolean."),
        ({"cpus": 1.5}, "cpus", None),  # DRF's own: not an integer
        ({"memory_mb": [1]}, "memory_mb", "Expected a number, got an array."),
    ],
)
def test_a_number_field_takes_a_json_number_only(acme, body, field, reason):
    client, pk = _quota(acme, gpus=2)
    response = client.patch(reverse("quota-detail", args=[pk]), body, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["error"]["fields"]
    assert list(errors) == [field]
    if reason:
        assert errors[field] == [reason]
    assert Quota.objects.get(pk=pk).gpus == 2


def test_a_string_field_takes_a_json_string_only(acme):
    client = acme.client(Role.ADMIN)
    url = reverse("project-detail", args=[acme.project.id])
    before = client.get(url).json()["description"]
    for wrong, kind in ((0, "a number"), (False, "a boolean"), ({"a": 1}, "an object")):
        response = client.patch(url, {"description": wrong}, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["fields"] == {
            "description": [f"Expected a string, got {kind}."]
        }
    assert client.get(url).json()["description"] == before
    response = client.patch(url, {"description": "zero"}, format="json")
    assert response.status_code == 200, response.content


def test_nested_objects_and_list_items_are_checked(acme):
    client = acme.client(Role.ADMIN)
    body = {"url": "https://hooks.example.com/x", "events": ["job.succeeded", 1]}
    response = client.post(reverse("webhook-list"), body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {"events": ["Expected a string, got a number."]}


def test_query_strings_are_still_read_as_strings(acme):
    viewer = acme.client(Role.VIEWER)
    response = viewer.get(reverse("job-list"), {"page_size": "5"})
    assert response.status_code == 200, response.content
    # number and boolean fields of a query serializer, given the strings a URL carries
    params = {"q": "x", "size": "5", "rank": "0", "histogram": "false"}
    response = viewer.get(reverse("logs-search"), params)
    assert response.status_code == 200, response.content
