"""Sign-in resists guessing: failures per account and per address lock sign-in for a cool-off,
a locked account answers exactly like a wrong password, and the lock and its end are audited.
The windows are settings, made short here (counters live in the tests' Redis)."""

import time
from types import SimpleNamespace

import pytest
from django.urls import reverse

from apps.tenancy import signin
from apps.tenancy.models import AuditEvent
from tests.factories import PASSWORD
from tests.tenancy.test_session_auth import csrf_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.TORUS_SIGNIN_ACCOUNT_FAILURES = 5
    settings.TORUS_SIGNIN_ADDRESS_FAILURES = 20
    settings.TORUS_SIGNIN_WINDOW_SECONDS = 60
    settings.TORUS_SIGNIN_LOCKOUT_SECONDS = 60


def attempt(username, password, *, ip="127.0.0.1"):
    client, token = csrf_client()
    return client.post(
        reverse("auth-login"),
        {"username": username, "password": password},
        format="json",
        HTTP_X_CSRFTOKEN=token,
        REMOTE_ADDR=ip,
    )


def answer(response) -> tuple:
    return response.status_code, response.json(), response.get("WWW-Authenticate")


def test_after_five_failures_even_the_right_password_is_refused_like_a_wrong_one(acme):
    wrong = [attempt("acme-viewer", f"guess-{n}") for n in range(5)]
    assert {r.status_code for r in wrong} == {401}
    locked = attempt("acme-viewer", PASSWORD)
    assert answer(locked) == answer(wrong[0])  # same status, body and header
    assert "sessionid" not in locked.cookies
    assert answer(attempt("acme-viewer", "another-guess")) == answer(wrong[0])
    event = AuditEvent.objects.get(tenant=acme.tenant, action="auth.lockout")
    assert event.target_repr == "acme-viewer"
    assert event.changes["scope"] == [None, "account"] and event.changes["failures"] == [None, 5]
    assert event.changes["until"][1]
    # Other accounts from the same address are not affected by one account's lock.
    assert attempt("acme-admin", PASSWORD).status_code == 200


def test_four_failures_do_not_lock_and_a_success_clears_the_count(acme):
    for _ in range(2):
        for n in range(4):
            assert attempt("acme-member", f"guess-{n}").status_code == 401
        assert attempt("acme-member", PASSWORD).status_code == 200
    assert not AuditEvent.objects.filter(action="auth.lockout").exists()


def test_the_username_is_counted_without_regard_to_case(acme):
    for name in ["ACME-viewer", "acme-VIEWER", "Acme-Viewer", "acme-viewer ", "acme-viewer"]:
        assert attempt(name, "guess").status_code == 401
    assert attempt("acme-viewer", PASSWORD).status_code == 401


def test_after_the_cool_off_the_right_password_signs_in_and_the_end_is_audited(acme, monkeypatch):
    for n in range(5):
        attempt("acme-owner", f"guess-{n}")
    assert attempt("acme-owner", PASSWORD).status_code == 401
    # the lockout's 60 s pass on the sign-in's clock (a 1 s lockout and a real sleep failed
    # on a loaded machine: the lock had ended before the attempt that checks it)
    real = time.time
    monkeypatch.setattr(signin, "time", SimpleNamespace(time=lambda: real() + 61))
    response = attempt("acme-owner", PASSWORD)
    assert response.status_code == 200, response.content
    assert response.json()["user"]["username"] == "acme-owner"
    actions = list(
        AuditEvent.objects.filter(tenant=acme.tenant, target_repr="acme-owner")
        .order_by("created_at")
        .values_list("action", flat=True)
    )
    assert actions[-3:] == ["auth.lockout", "auth.lockout_end", "auth.login"]
    assert actions.count("auth.lockout_end") == 1
    # After the lock the count starts again from zero.
    for n in range(4):
        attempt("acme-owner", f"guess-{n}")
    assert attempt("acme-owner", PASSWORD).status_code == 200


def test_failures_older_than_the_window_are_forgotten(acme, settings):
    settings.TORUS_SIGNIN_WINDOW_SECONDS = 1
    for n in range(4):
        attempt("acme-admin", f"guess-{n}")
    time.sleep(1.2)
    for n in range(4):
        attempt("acme-admin", f"guess-{n}")
    assert attempt("acme-admin", PASSWORD).status_code == 200


def test_failures_from_one_address_lock_that_address_for_every_account(acme, settings):
    settings.TORUS_SIGNIN_ADDRESS_FAILURES = 6
    for n in range(6):  # spread over accounts, fewer than 5 each
        username = ["no-such-person", "acme-owner", "acme-admin"][n % 3]
        assert attempt(username, "guess", ip="10.9.8.7").status_code == 401
    refused = attempt("acme-member", PASSWORD, ip="10.9.8.7")
    assert answer(refused) == answer(attempt("acme-member", "wrong", ip="10.1.1.1"))
    assert attempt("acme-member", PASSWORD, ip="10.1.1.1").status_code == 200
    # Audited in the tenants of the account whose failure set the lock (acme-admin).
    event = AuditEvent.objects.get(tenant=acme.tenant, action="auth.lockout")
    assert event.changes["scope"] == [None, "address"] and event.ip == "10.9.8.7"
    assert event.target_repr == "acme-admin"


def test_unknown_accounts_are_locked_too_and_answer_the_same(acme):
    answers = [answer(attempt("nobody-here", f"guess-{n}")) for n in range(7)]
    assert len(set(map(repr, answers))) == 1
    assert not AuditEvent.objects.filter(action="auth.lockout").exists()  # no tenant to tell


def test_default_limits_are_five_per_account_and_twenty_per_address():
    from django.conf import settings as django_settings

    from config import settings as module

    assert (module.TORUS_SIGNIN_ACCOUNT_FAILURES, module.TORUS_SIGNIN_ADDRESS_FAILURES) == (5, 20)
    assert module.TORUS_SIGNIN_WINDOW_SECONDS == module.TORUS_SIGNIN_LOCKOUT_SECONDS == 900
    assert django_settings.AUTHENTICATION_BACKENDS[-1] == (
        "django.contrib.auth.backends.ModelBackend"
    )
