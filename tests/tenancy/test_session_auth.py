"""Browser sessions: sign-in with CSRF, CSRF enforced on writes, sign-ins audited."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from apps.tenancy.models import AuditEvent, Role
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


def csrf_client() -> tuple[APIClient, str]:
    client = APIClient(enforce_csrf_checks=True)
    token = client.get(reverse("auth-csrf")).json()["csrf_token"]
    assert client.cookies["csrftoken"].value
    return client, token


def login(client, token, username) -> object:
    return client.post(
        reverse("auth-login"),
        {"username": username, "password": PASSWORD},
        format="json",
        HTTP_X_CSRFTOKEN=token,
    )


def test_login_requires_csrf(acme):
    client = APIClient(enforce_csrf_checks=True)
    response = client.post(
        reverse("auth-login"), {"username": "acme-admin", "password": PASSWORD}, format="json"
    )
    assert response.status_code == 403


def test_session_write_without_csrf_token_is_refused(acme):
    client, token = csrf_client()
    assert login(client, token, "acme-admin").status_code == 200
    token = client.cookies["csrftoken"].value  # rotated at sign-in
    body = {"name": "Via browser", "slug": "via-browser"}
    assert client.post(reverse("project-list"), body, format="json").status_code == 403
    response = client.post(reverse("project-list"), body, format="json", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 201


def test_sign_in_and_failed_sign_in_are_audited(acme):
    client, token = csrf_client()
    bad = client.post(
        reverse("auth-login"),
        {"username": "acme-viewer", "password": "nope"},
        format="json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert bad.status_code == 401
    assert login(client, token, "acme-viewer").status_code == 200
    events = AuditEvent.objects.filter(tenant=acme.tenant, target_repr="acme-viewer")
    assert sorted(events.values_list("action", flat=True)) == ["auth.login", "auth.login_failed"]
    assert events.get(action="auth.login").actor == acme.users[Role.VIEWER]
    assert events.get(action="auth.login_failed").actor is None


def test_me_lists_tenants_and_roles_for_a_session(acme, globex):
    globex.tenant.memberships.create(user=acme.users[Role.MEMBER], role=Role.VIEWER)
    client = APIClient()
    client.force_login(acme.users[Role.MEMBER])
    me = client.get(reverse("auth-me")).json()
    assert {(t["slug"], t["role"]) for t in me["tenants"]} == {
        ("acme", "member"),
        ("globex", "viewer"),
    }
    assert me["token"] is None


def test_logout_ends_the_session(acme):
    client, token = csrf_client()
    login(client, token, "acme-member")
    token = client.cookies["csrftoken"].value
    assert client.post(reverse("auth-logout"), HTTP_X_CSRFTOKEN=token).status_code == 204
    assert client.get(reverse("project-list")).status_code in (401, 403)


def test_session_user_with_two_tenants_must_name_the_tenant(acme, globex):
    user = acme.users[Role.ADMIN]
    globex.tenant.memberships.create(user=user, role=Role.ADMIN)
    client = APIClient()
    client.force_login(user)
    response = client.post(reverse("project-list"), {"name": "P", "slug": "p"}, format="json")
    assert response.status_code == 400
    assert "tenant" in response.json()["error"]["fields"]
    response = client.post(
        reverse("project-list"), {"name": "P", "slug": "p", "tenant": "globex"}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["tenant_id"] == str(globex.tenant.id)
