"""Throttling per token and per user, with 429 and Retry-After, through the real Redis cache."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from apps.tenancy.models import Role
from apps.tenancy.services import token_create
from tests.conftest import bearer_client


@pytest.fixture
def low_rates(settings, monkeypatch):
    # imported before the settings change: a first import afterwards would take the low
    # rates as its class default, and they would outlive this test
    from rest_framework.throttling import SimpleRateThrottle

    rates = {"principal": "3/min", "anon": "2/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", rates)


@pytest.mark.django_db
def test_each_token_has_its_own_budget(acme, low_rates):
    client = acme.client(Role.MEMBER)
    url = reverse("project-list")
    assert [client.get(url).status_code for _ in range(3)] == [200, 200, 200]
    response = client.get(url)
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert response.json()["error"]["code"] == "throttled"
    _, second = token_create(actor=None, user=acme.users[Role.MEMBER], tenant=acme.tenant, name="2")
    assert bearer_client(second).get(url).status_code == 200


@pytest.mark.django_db
def test_session_users_are_throttled_per_user(acme, low_rates):
    client = APIClient()
    client.force_login(acme.users[Role.VIEWER])
    codes = [client.get(reverse("project-list")).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]


@pytest.mark.django_db
def test_anonymous_callers_are_throttled_by_address(low_rates):
    client = APIClient()
    codes = [client.get(reverse("auth-csrf")).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


@pytest.mark.django_db
def test_a_history_left_by_drfs_list_throttle_does_not_break_requests(acme, low_rates):
    """The window is a sorted set under its own key: a pickled list kept by the previous
    implementation (a deploy mid-window) neither fails the request nor counts."""
    from django.core.cache import cache

    from apps.tenancy.models import AccessToken, hash_token

    token = AccessToken.objects.get(token_hash=hash_token(acme.tokens[Role.MEMBER]))
    cache.set(f"throttle_principal_token:{token.pk}", [0.0, 0.0, 0.0], 60)
    client = acme.client(Role.MEMBER)
    url = reverse("project-list")
    assert [client.get(url).status_code for _ in range(4)] == [200, 200, 200, 429]
