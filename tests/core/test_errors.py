"""One error envelope for every error, and bad input never writes anything."""

import pytest
from django.test import override_settings
from django.urls import path, reverse
from rest_framework.test import APIClient
from rest_framework.views import APIView

from apps.tenancy.models import Project, Role

pytestmark = pytest.mark.django_db


def assert_envelope(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "fields"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


def test_unknown_field_is_rejected_and_nothing_is_written(acme):
    client = acme.client(Role.ADMIN)
    response = client.post(reverse("project-list"), {"name": "A", "slug": "a", "colour": "red"})
    error = assert_envelope(response, 400, "invalid")
    assert error["fields"] == {"colour": ["Unknown field."]}
    assert not Project.objects.filter(slug="a").exists()


def test_wrong_type_names_the_field(acme):
    response = acme.client(Role.ADMIN).post(
        reverse("token-list"), {"name": "t", "read_only": "perhaps"}
    )
    error = assert_envelope(response, 400, "invalid")
    assert "read_only" in error["fields"]


def test_invalid_slug_names_the_field_and_the_reason(acme):
    response = acme.client(Role.ADMIN).post(
        reverse("project-list"), {"name": "A", "slug": "Bad Slug!"}
    )
    error = assert_envelope(response, 400, "invalid")
    assert "lowercase" in error["fields"]["slug"][0]


def test_malformed_json_is_a_400(acme):
    response = acme.client(Role.ADMIN).generic(
        "POST", reverse("project-list"), '{"name": "x", ', content_type="application/json"
    )
    assert_envelope(response, 400, "malformed_body")


def test_json_that_is_not_an_object_is_a_400(acme):
    response = acme.client(Role.ADMIN).generic(
        "POST", reverse("project-list"), "[1, 2]", content_type="application/json"
    )
    assert_envelope(response, 400, "invalid")


def test_oversized_body_is_a_413(acme, settings):
    settings.TORUS_MAX_BODY_BYTES = 2048
    response = acme.client(Role.ADMIN).post(
        reverse("project-list"), {"name": "x" * 5000, "slug": "big"}
    )
    assert_envelope(response, 413, "payload_too_large")
    assert not Project.objects.filter(slug="big").exists()


def test_method_not_allowed_is_a_405(acme):
    url = reverse("audit-event-list")
    assert_envelope(acme.client(Role.OWNER).post(url, {}), 405, "method_not_allowed")


def test_unknown_url_is_a_404_envelope():
    assert_envelope(APIClient().get("/api/v1/no-such-thing/"), 404, "not_found")


def test_conflict_is_a_409(acme):
    client = acme.client(Role.ADMIN)
    response = client.post(reverse("project-list"), {"name": "Dup", "slug": acme.project.slug})
    assert_envelope(response, 409, "conflict")


def test_unsupported_media_type_is_enveloped(acme):
    response = acme.client(Role.ADMIN).generic(
        "POST", reverse("project-list"), "name=x", content_type="application/x-www-form-urlencoded"
    )
    assert_envelope(response, 415, "unsupported_media_type")


class _Boom(APIView):
    permission_classes = []
    authentication_classes = []

    def get(self, request):
        raise RuntimeError("kaboom")


urlpatterns = [path("boom", _Boom.as_view())]


@override_settings(ROOT_URLCONF=__name__)
def test_unhandled_error_is_a_500_envelope_without_details():
    client = APIClient(raise_request_exception=False)
    error = assert_envelope(client.get("/boom"), 500, "server_error")
    assert "kaboom" not in error["message"]
