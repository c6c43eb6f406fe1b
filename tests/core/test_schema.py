"""The OpenAPI 3 schema: served, valid, and documenting every endpoint and its errors."""

import pytest
import yaml
from django.test import Client
from django.urls import reverse
from openapi_spec_validator import validate

from tests.tenancy.test_route_walk import api_routes


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def test_schema_validates(schema):
    validate(schema)
    assert schema["openapi"].startswith("3.")


def test_every_api_route_is_in_the_schema(schema):
    paths = set(schema["paths"])
    zero = "00000000-0000-0000-0000-000000000000"
    # a value each URL parameter accepts, and the name the schema gives it
    values = {"pk": (zero, "{id}"), "dataset_pk": (zero, "{dataset_pk}")}
    values["number"] = ("987654", "{number}")
    values["key_id"] = ("11111111-1111-1111-1111-111111111111", "{key_id}")
    for name, params in api_routes().items():
        fill = {p: values.get(p, (f"zz{p}zz", f"{{{p}}}")) for p in params}
        template = reverse(name, kwargs={p: value for p, (value, _) in fill.items()})
        for value, placeholder in fill.values():
            template = template.replace(value, placeholder)
        assert template in paths or template + "/" in paths, (name, template, sorted(paths))


def test_every_operation_documents_the_error_envelope(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert {"400", "405", "413", "429", "500"} <= codes, (method, path)
            if path not in ("/api/v1/auth/login", "/api/v1/auth/csrf"):
                assert {"401", "403", "404"} <= codes, (method, path)
            ref = operation["responses"]["400"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/Error")


def test_docs_page_is_served_without_external_assets(db):
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    assert "cdn." not in html and "unpkg" not in html


def test_schema_generates_without_warnings():
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null")
