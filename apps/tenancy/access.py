"""Building the Actor for a request: the token's tenant, or every tenant the user belongs to."""

from apps.core.actor import Actor
from apps.tenancy.models import AccessToken, Membership


def actor_for_user(*, user, token: AccessToken | None = None) -> Actor:
    if user is None or not user.is_authenticated:
        return Actor(user=user)
    if getattr(token, "member_role", None):  # read with the token (authentication.py)
        return Actor(user=user, roles={token.tenant_id: token.member_role}, token=token)
    memberships = Membership.objects.filter(user=user)
    if token is not None:
        memberships = memberships.filter(tenant_id=token.tenant_id)
    roles = dict(memberships.values_list("tenant_id", "role"))
    return Actor(user=user, roles=roles, token=token)


def actor_for(request) -> Actor:
    """The acting principal of a DRF or Django request, computed once per request."""
    cached = getattr(request, "_torus_actor", None)
    if cached is not None:
        return cached
    token = getattr(request, "auth", None)
    actor = actor_for_user(
        user=request.user, token=token if isinstance(token, AccessToken) else None
    )
    request._torus_actor = actor
    return actor


def client_ip(request) -> str | None:
    return request.META.get("REMOTE_ADDR") or None
