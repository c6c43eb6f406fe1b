"""Access token lifecycle: shown once, stored hashed, expiry, revocation, tenant binding, use."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.tenancy.models import AccessToken, AuditEvent, Role, hash_token
from apps.tenancy.services import token_create
from tests.conftest import bearer_client

pytestmark = pytest.mark.django_db


def test_created_token_is_shown_once_and_stored_hashed(acme):
    client = acme.client(Role.MEMBER)
    response = client.post(reverse("token-list"), {"name": "pipeline"})
    assert response.status_code == 201
    plaintext = response.json()["token"]
    token = AccessToken.objects.get(pk=response.json()["id"])
    assert token.token_hash == hash_token(plaintext)
    assert plaintext not in str(AccessToken.objects.filter(pk=token.pk).values().first())
    detail = client.get(reverse("token-detail", kwargs={"pk": token.pk})).json()
    assert "token" not in detail and detail["prefix"] == plaintext[: len(token.prefix)]
    assert bearer_client(plaintext).get(reverse("auth-me")).json()["token"]["name"] == "pipeline"


def test_expired_token_is_refused(acme):
    token, plaintext = token_create(
        actor=None,
        user=acme.users[Role.MEMBER],
        tenant=acme.tenant,
        name="old",
        expires_at=timezone.now() + timedelta(seconds=60),
    )
    AccessToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = bearer_client(plaintext).get(reverse("project-list"))
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Token has expired."


def test_expiry_in_the_past_is_a_400(acme):
    past = (timezone.now() - timedelta(days=1)).isoformat()
    response = acme.client(Role.MEMBER).post(
        reverse("token-list"), {"name": "x", "expires_at": past}
    )
    assert response.status_code == 400
    assert "expires_at" in response.json()["error"]["fields"]


def test_revoked_token_is_refused_and_revocation_is_audited(acme):
    client = acme.client(Role.MEMBER)
    created = client.post(reverse("token-list"), {"name": "short-lived"}).json()
    response = client.delete(reverse("token-detail", kwargs={"pk": created["id"]}))
    assert response.status_code == 204
    response = bearer_client(created["token"]).get(reverse("project-list"))
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Token has been revoked."
    assert AuditEvent.objects.filter(action="token.revoke", target_id=created["id"]).count() == 1
    listed = client.get(reverse("token-list"), {"revoked": "true"}).json()["results"]
    assert [t["id"] for t in listed] == [created["id"]]


def test_token_of_one_tenant_sees_nothing_of_another_tenant_of_the_same_user(acme, globex):
    user = acme.users[Role.ADMIN]
    globex.tenant.memberships.create(user=user, role=Role.ADMIN)
    _, acme_only = token_create(actor=None, user=user, tenant=acme.tenant, name="acme")
    client = bearer_client(acme_only)
    slugs = {t["slug"] for t in client.get(reverse("tenant-list")).json()["results"]}
    assert slugs == {"acme"}
    url = reverse("project-detail", kwargs={"pk": globex.project.pk})
    assert client.get(url).status_code == 404
    # The same user's session sees both tenants.
    session = bearer_client(None)
    session.force_login(user)
    assert session.get(url).status_code == 200


def test_token_stops_working_when_its_user_leaves_the_tenant(acme):
    plaintext = acme.tokens[Role.MEMBER]
    acme.tenant.memberships.filter(user=acme.users[Role.MEMBER]).delete()
    assert bearer_client(plaintext).get(reverse("project-list")).status_code == 401


def test_use_is_recorded_at_most_once_per_interval(acme, settings):
    settings.TORUS_TOKEN_USE_RECORD_INTERVAL = 3600
    client = acme.client(Role.VIEWER)
    for _ in range(3):
        assert client.get(reverse("project-list")).status_code == 200
    token = AccessToken.objects.get(tenant=acme.tenant, user=acme.users[Role.VIEWER])
    assert token.last_used_at is not None and token.last_used_ip == "127.0.0.1"
    assert (
        AuditEvent.objects.filter(action="token.use", token=None, target_id=str(token.pk)).count()
        == 1
    )


def test_members_see_only_their_own_tokens_admins_see_all(acme):
    member_ids = {
        t["user"]["username"]
        for t in acme.client(Role.MEMBER).get(reverse("token-list")).json()["results"]
    }
    assert member_ids == {"acme-member"}
    admin_ids = {
        t["user"]["username"]
        for t in acme.client(Role.ADMIN).get(reverse("token-list")).json()["results"]
    }
    assert admin_ids == {"acme-owner", "acme-admin", "acme-member", "acme-viewer"}
