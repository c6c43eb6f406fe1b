"""`Authorization: Bearer <token>` authentication for the API."""

from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone
from rest_framework import authentication, exceptions

from apps.core.api.throttling import PrincipalRateThrottle
from apps.tenancy.models import AccessToken, Membership, hash_token
from apps.tenancy.services import token_record_use
from apps.tenancy.token_cache import tokens


def _token_row(token_hash: str) -> AccessToken:
    """The token with its user, tenant and the user's role there (`member_role`, None if
    no longer a member), in one query; AuthenticationFailed if there is none."""
    role = Membership.objects.filter(user_id=OuterRef("user_id"), tenant_id=OuterRef("tenant_id"))
    token = (
        AccessToken.objects.select_related("user", "tenant")
        .annotate(member_role=Subquery(role.order_by().values("role")[:1]))
        .filter(token_hash=token_hash)
        .first()
    )
    if token is None:
        raise exceptions.AuthenticationFailed("Invalid token.")
    return token


def token_lookup(plaintext: str, *, also=None) -> AccessToken:
    """The active token for a plaintext value, or AuthenticationFailed with the reason. The
    row comes from this process's cache while nothing it depends on has changed
    (apps/tenancy/token_cache.py); the checks run on every call. `also`: see
    TokenCache.resolve."""
    token_hash = hash_token(plaintext)
    token = tokens.resolve(token_hash, lambda: _token_row(token_hash), also=also)
    if not token.user.is_active:
        raise exceptions.AuthenticationFailed("Invalid token.")
    if token.revoked_at is not None:
        raise exceptions.AuthenticationFailed("Token has been revoked.")
    if not token.is_active():
        raise exceptions.AuthenticationFailed("Token has expired.")
    if token.member_role is None:  # read with the token, in the same query
        raise exceptions.AuthenticationFailed("Token's user is no longer in its tenant.")
    return token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        try:
            plaintext = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("Invalid token.") from exc
        # the throttle's window of this token goes to Redis with the token's counters
        token = token_lookup(plaintext, also=partial(PrincipalRateThrottle.prefetch, request))
        self._record_use(token, request.META.get("REMOTE_ADDR"))
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword

    @staticmethod
    def _record_use(token: AccessToken, ip: str | None) -> None:
        interval = timedelta(seconds=settings.TORUS_TOKEN_USE_RECORD_INTERVAL)
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= interval:
            with transaction.atomic():
                token_record_use(token=token, ip=ip, now=now)
            tokens.note_use(token.token_hash, now)
