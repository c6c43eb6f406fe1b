"""Password sign-in that resists guessing.

Failed sign-ins are counted per account (the username as typed, case-folded) and per client
address, in Redis (the cache), over TORUS_SIGNIN_WINDOW_SECONDS. At TORUS_SIGNIN_ACCOUNT_FAILURES
(or TORUS_SIGNIN_ADDRESS_FAILURES) the account (or the address) is locked for
TORUS_SIGNIN_LOCKOUT_SECONDS: every attempt is refused, even with the right password, and the
caller sees exactly what a wrong password gets. The lock and its end are audited
(auth.lockout, auth.lockout_end) in the tenants of the account concerned, and logged.
"""

import hashlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.core.cache import cache
from django.db import transaction

from apps.tenancy.audit import audit_record
from apps.tenancy.models import Membership

logger = logging.getLogger(__name__)

# Markers outlive their lock so its end can be recorded at the next attempt.
MARKER_GRACE_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class _Scope:
    kind: str  # "account" or "address"
    ident: str
    limit: int

    def key(self, what: str) -> str:
        digest = hashlib.sha256(self.ident.encode()).hexdigest()[:40]
        return f"signin:{what}:{self.kind}:{digest}"


def _scopes(*, username: str, ip: str | None) -> list[_Scope]:
    scopes = [
        _Scope("account", username.strip().casefold(), settings.TORUS_SIGNIN_ACCOUNT_FAILURES)
    ]
    if ip:
        scopes.append(_Scope("address", ip, settings.TORUS_SIGNIN_ADDRESS_FAILURES))
    return scopes


def signin(*, request, username: str, password: str, ip: str | None):
    """The user these credentials sign in, or None (wrong, or locked: the same to the caller).

    Raises apps.core.exceptions.DirectoryUnavailable when the directory could not be asked;
    that is not counted as a failure.
    """
    scopes = _scopes(username=username, ip=ip)
    now = time.time()
    for scope in scopes:
        _record_lock_end(scope=scope, now=now, ip=ip)
    if any(_locked(scope, now=now) for scope in scopes):
        get_user_model()().set_password(password)  # cost what checking it would cost
        return None
    user = authenticate(request, username=username, password=password)
    if user is None:
        for scope in scopes:
            _count_failure(scope=scope, username=username, ip=ip)
        return None
    cache.delete(scopes[0].key("failures"))  # a success clears the account's count
    return user


def _locked(scope: _Scope, *, now: float) -> bool:
    until = cache.get(scope.key("lock"))
    return until is not None and until > now


def _count_failure(*, scope: _Scope, username: str, ip: str | None) -> None:
    key = scope.key("failures")
    window = settings.TORUS_SIGNIN_WINDOW_SECONDS
    cache.add(key, 0, timeout=window)  # the window starts at the first failure
    try:
        failures = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=window)
        failures = 1
    if failures < scope.limit:
        return
    lockout = settings.TORUS_SIGNIN_LOCKOUT_SECONDS
    until = time.time() + lockout
    if not cache.add(scope.key("lock"), until, timeout=lockout):
        return  # a concurrent request locked it already
    cache.delete(key)
    cache.set(
        scope.key("marker"),
        {"until": until, "username": username},
        timeout=lockout + MARKER_GRACE_SECONDS,
    )
    logger.warning(
        "sign-in: %s %s locked for %ss after %s failures",
        scope.kind,
        username if scope.kind == "account" else ip,
        lockout,
        failures,
    )
    _audit(
        username=username,
        action="auth.lockout",
        ip=ip,
        changes={
            "scope": [None, scope.kind],
            "failures": [None, failures],
            "until": [None, _iso(until)],
        },
    )


def _record_lock_end(*, scope: _Scope, now: float, ip: str | None) -> None:
    marker = cache.get(scope.key("marker"))
    if marker is None or marker["until"] > now:
        return
    if not cache.delete(scope.key("marker")):
        return  # another request recorded it
    logger.info("sign-in: %s lock of %s ended", scope.kind, marker["username"])
    _audit(
        username=marker["username"],
        action="auth.lockout_end",
        ip=ip,
        changes={"scope": [scope.kind, None], "until": [_iso(marker["until"]), None]},
    )


def _audit(*, username: str, action: str, ip: str | None, changes: dict) -> None:
    """One event in each tenant of the account (none when no such account exists)."""
    user = get_user_model().objects.filter(username__iexact=username.strip()).first()
    if user is None:
        return
    with transaction.atomic():
        for tenant_id in Membership.objects.filter(user=user).values_list("tenant_id", flat=True):
            audit_record(
                actor=None,
                tenant_id=tenant_id,
                action=action,
                target=user,
                changes=changes,
                ip=ip,
            )


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat()
