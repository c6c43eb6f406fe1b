"""seed_demo: idempotent demo tenants, printed as JSON with fresh working tokens."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from apps.tenancy.models import AccessToken, Membership, Project, Tenant
from tests.conftest import bearer_client

pytestmark = pytest.mark.django_db


def seed() -> dict:
    out = StringIO()
    call_command("seed_demo", "--json", stdout=out)
    return json.loads(out.getvalue())


def test_seed_is_idempotent_and_mints_fresh_working_tokens():
    first, second = seed(), seed()
    assert [t["slug"] for t in second["tenants"]] == ["acme", "globex"]
    assert Tenant.objects.count() == 2 and Project.objects.count() == 2
    assert Membership.objects.count() == 8
    roles = {u["role"] for u in second["tenants"][0]["users"]}
    assert roles == {"owner", "admin", "member", "viewer"}
    old = first["tenants"][0]["users"][0]["token"]
    new = second["tenants"][0]["users"][0]["token"]
    assert old != new
    assert bearer_client(old).get(reverse("auth-me")).status_code == 401
    me = bearer_client(new).get(reverse("auth-me")).json()
    assert me["tenants"] == [
        {"id": second["tenants"][0]["id"], "slug": "acme", "name": "Acme Research", "role": "owner"}
    ]
    assert AccessToken.objects.filter(revoked_at__isnull=True).count() == 8


def test_demo_tenants_do_not_see_each_other():
    data = seed()
    acme, globex = data["tenants"]
    client = bearer_client(acme["users"][0]["token"])
    url = reverse("project-detail", kwargs={"pk": globex["project"]["id"]})
    assert client.get(url).status_code == 404
