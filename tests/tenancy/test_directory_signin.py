"""Sign-in against the real OpenLDAP directory (platform/services/components/ldap), before local
accounts; an unreachable directory is a 503, never a wrong password, and writes nothing."""

import socket
import time
import uuid
from pathlib import Path

import ldap
import ldap.modlist
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import reverse

from apps.core.exceptions import DirectoryUnavailable
from apps.tenancy.ldap_signin import TorusLDAPBackend
from apps.tenancy.models import AuditEvent
from tests.factories import PASSWORD
from tests.tenancy.test_signin_throttle import attempt

pytestmark = pytest.mark.django_db
User = get_user_model()


def _admin_connection():
    """The directory's admin bind (the password the ldap component generated)."""
    path = getattr(settings, "TORUS_LDAP_BIND_PASSWORD_FILE", None) or str(
        Path(settings.VAR_DIR) / "secrets" / "ldap-admin.pass"
    )
    conn = ldap.initialize(settings.TORUS_LDAP_URL)
    conn.set_option(ldap.OPT_NETWORK_TIMEOUT, 3)
    conn.simple_bind_s(f"cn=admin,{settings.TORUS_LDAP_BASE_DN}", Path(path).read_text().strip())
    return conn


@pytest.fixture
def directory_person():
    """A person in ou=people (inetOrgPerson), removed afterwards."""
    name = f"ldt-{uuid.uuid4().hex[:10]}"
    dn = f"uid={name},ou=people,{settings.TORUS_LDAP_BASE_DN}"
    entry = {
        "objectClass": [b"inetOrgPerson"],
        "uid": [name.encode()],
        "cn": [b"Ada Lovelace"],
        "givenName": [b"Ada"],
        "sn": [b"Lovelace"],
        "mail": [f"{name}@torus.example".encode()],
        "userPassword": [b"directory-pass-1"],
    }
    conn = _admin_connection()
    conn.add_s(dn, ldap.modlist.addModlist(entry))
    yield name
    conn.delete_s(dn)
    conn.unbind_s()


@pytest.fixture
def directory_down(settings):
    """TORUS_LDAP_URL pointed at a closed port on 127.0.0.1 (the shared slapd keeps running)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.TORUS_LDAP_URL = f"ldap://127.0.0.1:{port}"


def test_directory_backend_comes_first_then_local_accounts():
    assert settings.AUTHENTICATION_BACKENDS == [
        "apps.tenancy.ldap_signin.TorusLDAPBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    backend = TorusLDAPBackend()
    template = backend.settings.USER_DN_TEMPLATE
    assert template == f"uid=%(user)s,ou=people,{settings.TORUS_LDAP_BASE_DN}"
    assert backend.settings.CONNECTION_OPTIONS[ldap.OPT_NETWORK_TIMEOUT] == 3


def test_first_directory_sign_in_makes_a_django_user_from_the_entry(directory_person):
    assert not User.objects.filter(username=directory_person).exists()
    response = attempt(directory_person, "directory-pass-1")
    assert response.status_code == 200, response.content
    assert response.json()["user"]["username"] == directory_person
    user = User.objects.get(username=directory_person)
    assert (user.first_name, user.last_name) == ("Ada", "Lovelace")
    assert user.email == f"{directory_person}@torus.example"
    assert not user.has_usable_password()  # the directory holds the password, not Django
    me = response.client.get(reverse("auth-me"))
    assert me.status_code == 200 and me.json()["user"]["username"] == directory_person
    # A second sign-in reuses the user; a wrong directory password is a plain 401.
    assert attempt(directory_person, "directory-pass-1").status_code == 200
    assert User.objects.filter(username=directory_person).count() == 1
    wrong = attempt(directory_person, "not-it")
    assert wrong.status_code == 401
    assert wrong.json()["error"]["message"] == "Wrong username or password."


def test_directory_entry_changes_reach_the_django_user(directory_person):
    assert attempt(directory_person, "directory-pass-1").status_code == 200
    conn = _admin_connection()
    dn = f"uid={directory_person},ou=people,{settings.TORUS_LDAP_BASE_DN}"
    conn.modify_s(dn, [(ldap.MOD_REPLACE, "sn", [b"King"])])
    assert attempt(directory_person, "directory-pass-1").status_code == 200
    assert User.objects.get(username=directory_person).last_name == "King"


def test_local_accounts_sign_in_while_the_directory_is_up(acme):
    response = attempt("acme-member", PASSWORD)
    assert response.status_code == 200
    assert response.json()["user"]["username"] == "acme-member"


def test_directory_down_is_a_503_and_writes_nothing(directory_person, directory_down):
    started = time.monotonic()
    response = attempt(directory_person, "directory-pass-1")
    assert time.monotonic() - started < 5
    assert response.status_code == 503
    assert response.json()["error"] == {
        "code": "directory_unavailable",
        "message": "The directory service is unreachable; try again later.",
        "fields": {},
    }
    assert response["Retry-After"]
    assert not User.objects.filter(username=directory_person).exists()
    assert not AuditEvent.objects.filter(action__startswith="auth.").exists()


def test_an_outage_is_not_counted_as_failed_guesses(directory_person, directory_down, settings):
    for _ in range(settings.TORUS_SIGNIN_ACCOUNT_FAILURES + 1):
        assert attempt(directory_person, "directory-pass-1").status_code == 503
    settings.TORUS_LDAP_URL = f"ldap://127.0.0.1:{_slapd_port()}"  # the directory is back
    assert attempt(directory_person, "directory-pass-1").status_code == 200


def test_local_accounts_keep_working_during_an_outage(acme, directory_down):
    assert attempt("acme-viewer", PASSWORD).status_code == 200
    # A wrong password cannot be told from a directory person's: the outage is the answer.
    assert attempt("acme-viewer", "wrong").status_code == 503


def test_the_backend_raises_directory_unavailable_not_none(directory_down):
    with pytest.raises(DirectoryUnavailable):
        TorusLDAPBackend().authenticate(None, username="someone", password="anything")


def _slapd_port() -> int:
    from config import settings as module

    return int(module.TORUS_LDAP_URL.rstrip("/").rsplit(":", 1)[1])
