"""The token cache (apps/tenancy/token_cache.py): a token resolved once per web process, and a
change to what it depends on refused on the next request, in this process and in another
(a second TokenCache: what another web worker holds; the counters are in the same Redis)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.tenancy import authentication, services
from apps.tenancy.models import AccessToken, Membership, Role, hash_token
from apps.tenancy.token_cache import TokenCache, bump, tokens
from tests.conftest import bearer_client

URL = "/api/v1/projects/"


@pytest.fixture(autouse=True)
def _fresh_cache():
    tokens.clear()
    yield
    tokens.clear()


def _other_worker(plaintext: str):
    """The token as another web process resolves it, with its own cache (filled first)."""
    other = TokenCache()
    key = hash_token(plaintext)

    def lookup():
        return other.resolve(key, lambda: authentication._token_row(key))

    lookup()
    return lookup


def _status(plaintext: str):
    response = bearer_client(plaintext).get(URL)
    return response.status_code, response.json()


def test_a_cached_token_costs_no_query(acme):
    plaintext = acme.tokens[Role.MEMBER]
    authentication.token_lookup(plaintext)  # first sight: read, counters, read again
    with CaptureQueriesContext(connection) as queries:
        token = authentication.token_lookup(plaintext)
    assert len(queries) == 0
    assert token.member_role == Role.MEMBER
    assert token.user == acme.users[Role.MEMBER]
    # each call gets its own copy: a view changing it changes nothing for the next request
    token.user.first_name = "changed"
    assert authentication.token_lookup(plaintext).user.first_name != "changed"


def test_revoked_token_is_refused_at_once_here_and_in_another_worker(acme):
    plaintext = acme.tokens[Role.MEMBER]
    assert _status(plaintext)[0] == 200
    other = _other_worker(plaintext)
    token = AccessToken.objects.get(token_hash=hash_token(plaintext))
    services.token_revoke(actor=None, token=token)

    status, body = _status(plaintext)
    assert status == 401
    assert body["error"]["message"] == "Token has been revoked."
    assert other().revoked_at is not None


def test_removed_member_is_refused_at_once_here_and_in_another_worker(acme):
    plaintext = acme.tokens[Role.VIEWER]
    assert _status(plaintext)[0] == 200
    other = _other_worker(plaintext)
    Membership.objects.filter(tenant=acme.tenant, user=acme.users[Role.VIEWER]).delete()

    status, body = _status(plaintext)
    assert status == 401
    assert body["error"]["message"] == "Token's user is no longer in its tenant."
    assert other().member_role is None


def test_role_change_applies_to_the_next_request(acme):
    plaintext = acme.tokens[Role.ADMIN]
    client = bearer_client(plaintext)
    invite = {"tenant": str(acme.tenant.pk), "username": "someone-new", "role": "member"}
    assert authentication.token_lookup(plaintext).member_role == Role.ADMIN
    other = _other_worker(plaintext)
    membership = Membership.objects.get(tenant=acme.tenant, user=acme.users[Role.ADMIN])
    membership.role = Role.VIEWER
    membership.save()

    assert client.post("/api/v1/invitations/", invite, format="json").status_code == 403
    assert other().member_role == Role.VIEWER


def test_deactivated_user_is_refused_at_once(acme):
    plaintext = acme.tokens[Role.OWNER]
    assert _status(plaintext)[0] == 200
    other = _other_worker(plaintext)
    user = acme.users[Role.OWNER]
    user.is_active = False
    user.save()

    status, body = _status(plaintext)
    assert status == 401
    assert body["error"]["message"] == "Invalid token."
    assert other().user.is_active is False


def test_a_change_without_signals_is_seen_after_bump(acme):
    """QuerySet.update() sends no signal: the code that uses it calls bump()."""
    plaintext = acme.tokens[Role.MEMBER]
    assert _status(plaintext)[0] == 200
    token = AccessToken.objects.get(token_hash=hash_token(plaintext))
    AccessToken.objects.filter(pk=token.pk).update(read_only=True)
    assert authentication.token_lookup(plaintext).read_only is False  # still the cached row
    bump(token_ids=[token.pk])
    assert authentication.token_lookup(plaintext).read_only is True


def test_membership_delete_service_revokes_and_refuses(acme):
    """membership_delete revokes the member's tokens with QuerySet.update(): the membership's
    own delete moves the user's counter, so the cached token goes too."""
    plaintext = acme.tokens[Role.MEMBER]
    assert _status(plaintext)[0] == 200
    membership = Membership.objects.get(tenant=acme.tenant, user=acme.users[Role.MEMBER])
    owner = authentication.token_lookup(acme.tokens[Role.OWNER])
    from apps.tenancy.access import actor_for_user

    services.membership_delete(
        actor=actor_for_user(user=owner.user, token=owner), membership=membership
    )
    assert _status(plaintext)[0] == 401


def test_a_cached_token_that_expires_is_refused(acme, monkeypatch):
    """Expiry is checked at each use, on the cached row: time passing moves no counter."""
    from datetime import timedelta

    from django.utils import timezone

    plaintext = acme.tokens[Role.MEMBER]
    soon = timezone.now() + timedelta(hours=1)
    AccessToken.objects.filter(token_hash=hash_token(plaintext)).update(expires_at=soon)
    assert authentication.token_lookup(plaintext).expires_at == soon  # cached from here on
    later = soon + timedelta(seconds=1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    refused = pytest.raises(authentication.exceptions.AuthenticationFailed, match="expired")
    with CaptureQueriesContext(connection) as queries, refused:
        authentication.token_lookup(plaintext)
    assert len(queries) == 0


def test_a_cached_token_records_its_use_once_an_interval(acme):
    from apps.tenancy.models import AuditEvent

    plaintext = acme.tokens[Role.VIEWER]
    for _ in range(4):
        assert _status(plaintext)[0] == 200
    token = AccessToken.objects.get(token_hash=hash_token(plaintext))
    assert token.last_used_at is not None
    assert AuditEvent.objects.filter(action="token.use", target_id=str(token.pk)).count() == 1
