"""Sign-in against the OpenLDAP directory (django-auth-ldap), before Django's local accounts.

People are uid=<username>,ou=people,<TORUS_LDAP_BASE_DN>. The first sign-in makes their Django
user (name and e-mail from the directory); later ones refresh it. django-auth-ldap swallows
LDAP errors, so an unreachable directory would read as a wrong password: here it raises
DirectoryUnavailable instead (the sign-in view answers 503), unless the name and password are
those of a local account, which keeps working while the directory is down.
"""

import ldap
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django_auth_ldap.backend import LDAPBackend, ldap_error

from apps.core.exceptions import DirectoryUnavailable

# Errors that mean "could not talk to the directory", not "wrong password".
UNREACHABLE = (ldap.SERVER_DOWN, ldap.TIMEOUT, ldap.CONNECT_ERROR)


class TorusLDAPBackend(LDAPBackend):
    def __init__(self):
        super().__init__()
        timeout = settings.TORUS_LDAP_TIMEOUT
        # Read per instance (Django makes one per authenticate()), so settings overrides apply;
        # AUTH_LDAP_* settings, where set, still win (django-auth-ldap's own names).
        self.default_settings = {
            "SERVER_URI": settings.TORUS_LDAP_URL,
            "USER_DN_TEMPLATE": f"uid=%(user)s,ou=people,{settings.TORUS_LDAP_BASE_DN}",
            "BIND_AS_AUTHENTICATING_USER": True,  # read the entry with the person's own bind
            "USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn", "email": "mail"},
            "ALWAYS_UPDATE_USER": True,
            "CONNECTION_OPTIONS": {
                ldap.OPT_NETWORK_TIMEOUT: timeout,
                ldap.OPT_TIMEOUT: timeout,
                ldap.OPT_REFERRALS: 0,
            },
        }

    def authenticate(self, request, username=None, password=None, **kwargs):
        try:
            with transaction.atomic():  # no half-made user if the directory drops mid-way
                return super().authenticate(request, username=username, password=password, **kwargs)
        except DirectoryUnavailable:
            if _local_password_ok(username=username, password=password):
                return None  # ModelBackend, next in AUTHENTICATION_BACKENDS, signs them in
            raise


def _local_password_ok(*, username: str | None, password: str | None) -> bool:
    """A local account (a usable password in Django) with exactly these credentials."""
    if not username or not password:
        return False
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    return user is not None and user.has_usable_password() and user.check_password(password)


def _raise_when_unreachable(sender, context, exception, **kwargs):
    """django-auth-ldap's documented error hook: an exception raised here propagates."""
    if context == "authenticate" and isinstance(exception, UNREACHABLE):
        raise DirectoryUnavailable(str(exception)) from exception


ldap_error.connect(_raise_when_unreachable, sender=TorusLDAPBackend, weak=False)
