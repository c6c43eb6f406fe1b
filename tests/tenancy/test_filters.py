"""Lists filter and order by query parameters, and a filter can never widen the tenant scope."""

import pytest
from django.urls import reverse

from apps.tenancy.models import Role
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


def test_filter_by_tenant_slug_of_another_tenant_is_empty(acme, globex):
    client = acme.client(Role.OWNER)
    for name in ("project-list", "membership-list", "token-list", "audit-event-list"):
        rows = client.get(reverse(name), {"tenant": "globex"}).json()["results"]
        assert rows == [], name
        rows = client.get(reverse(name), {"tenant": str(globex.tenant.id)}).json()["results"]
        assert rows == [], name


def test_projects_filter_and_order(acme):
    ProjectFactory(tenant=acme.tenant, slug="zeta", name="Zeta vision")
    ProjectFactory(tenant=acme.tenant, slug="alpha", name="Alpha")
    client = acme.client(Role.VIEWER)
    by_name = client.get(reverse("project-list"), {"name": "vision"}).json()["results"]
    assert [p["slug"] for p in by_name] == ["zeta"]
    ordered = client.get(reverse("project-list"), {"ordering": "slug"}).json()["results"]
    assert [p["slug"] for p in ordered] == ["acme-proj", "alpha", "zeta"]


def test_memberships_filter_by_role(acme):
    rows = acme.client(Role.VIEWER).get(reverse("membership-list"), {"role": "admin"}).json()
    assert [m["user_detail"]["username"] for m in rows["results"]] == ["acme-admin"]


def test_bad_filter_value_is_a_400(acme):
    response = acme.client(Role.VIEWER).get(reverse("membership-list"), {"role": "emperor"})
    assert response.status_code == 400
    assert "role" in response.json()["error"]["fields"]


def test_ordering_by_an_unknown_field_is_ignored_not_a_500(acme):
    response = acme.client(Role.VIEWER).get(reverse("project-list"), {"ordering": "secret"})
    assert response.status_code == 200


def test_owners_set_the_log_retention_within_bounds(acme):
    url = reverse("tenant-detail", kwargs={"pk": acme.tenant.pk})
    owner = acme.client(Role.OWNER)
    assert owner.patch(url, {"log_retention_days": 0}).status_code == 400
    response = owner.patch(url, {"log_retention_days": 14})
    assert response.status_code == 200 and response.json()["log_retention_days"] == 14
