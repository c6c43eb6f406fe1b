"""Who is calling: a tenant access token (`tor_...`) or a deployment key (`tsk_...`).

A deployment key is authorised from the route alone (its hash is in the route's `keys`). A
tenant token is resolved as the API resolves it (apps/tenancy/authentication.token_lookup, in
a worker thread, once) and then kept in this process beside the token cache's three
generation counters as they were just before the row was read; each request reads the
counters in the round trip it makes to Redis anyway (`counters()`), and any change reads the
token again. So a revoked token or a removed member is refused on the next request.
"""

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass

from apps.serving.gateway import db
from apps.serving.gateway.errors import GatewayError
from apps.tenancy.models import ROLE_RANK, Role

TTL_S = 60.0
MAX_ENTRIES = 4096
TOKEN_PREFIX = "tor_"
KEY_PREFIX = "tsk_"


@dataclass(frozen=True)
class Caller:
    kind: str  # "token" or "key"
    digest: str  # sha256 of the bearer value: the rate limit's identity
    user_id: str | None = None
    tenant_id: str | None = None
    role: str | None = None
    read_only: bool = False
    key_id: str | None = None


@dataclass
class _Entry:
    caller: Caller
    keys: list[str]
    generations: list
    expires: float


_tokens: "OrderedDict[str, _Entry]" = OrderedDict()


def bearer(headers: list[tuple[bytes, bytes]]) -> str:
    """The bearer value of the Authorization header, or a 401."""
    for name, value in headers:
        if name == b"authorization":
            parts = value.split()
            if len(parts) == 2 and parts[0].lower() == b"bearer":
                try:
                    return parts[1].decode("ascii")
                except UnicodeDecodeError:
                    break
            break
    raise GatewayError(
        401,
        "Missing or malformed Authorization header: send 'Authorization: Bearer <token>'.",
        code="invalid_api_key",
    )


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def cached_token(token_digest: str) -> _Entry | None:
    entry = _tokens.get(token_digest)
    if entry is None or entry.expires < time.monotonic():
        return None
    return entry


def still_valid(entry: _Entry, generations: list) -> bool:
    return generations == entry.generations


def _load_token(*, plaintext: str, ip: str | None) -> tuple[Caller, list[str], list]:
    """In a worker thread: the token's counters, then its row (the order TokenCache keeps)."""
    from rest_framework.exceptions import AuthenticationFailed

    from apps.core.generations import redis_client
    from apps.tenancy import token_cache
    from apps.tenancy.authentication import BearerTokenAuthentication, token_lookup

    try:
        token = token_lookup(plaintext)
        keys = token_cache._keys(token)
        client = redis_client()
        generations = client.mget(keys) if client is not None else []
        token = token_lookup(plaintext)  # read after its counters
    except AuthenticationFailed as exc:
        raise GatewayError(401, str(exc.detail), code="invalid_api_key") from None
    BearerTokenAuthentication._record_use(token, ip)
    caller = Caller(
        kind="token",
        digest=digest(plaintext),
        user_id=str(token.user_id),
        tenant_id=str(token.tenant_id),
        role=token.member_role,
        read_only=bool(token.read_only),
    )
    return caller, keys, generations


async def load_token(plaintext: str, *, ip: str | None) -> Caller:
    caller, keys, generations = await db.once(
        ("token", digest(plaintext)), _load_token, plaintext=plaintext, ip=ip
    )
    _tokens[caller.digest] = _Entry(caller, keys, generations, time.monotonic() + TTL_S)
    while len(_tokens) > MAX_ENTRIES:
        _tokens.popitem(last=False)
    return caller


def _key_elsewhere(*, key_digest: str) -> bool:
    """An active key of another deployment (a 404 there, not a 401)."""
    from apps.serving.models import DeploymentKey

    return DeploymentKey.objects.filter(token_hash=key_digest, revoked_at__isnull=True).exists()


async def key_caller(plaintext: str, route: dict) -> Caller:
    key_digest = digest(plaintext)
    key_id = route.get("keys", {}).get(key_digest)
    if key_id is not None:
        return Caller(kind="key", digest=key_digest, key_id=key_id)
    if await db.in_thread(_key_elsewhere, key_digest=key_digest):
        raise not_found(route["id"])
    raise GatewayError(401, "Invalid or revoked deployment key.", code="invalid_api_key")


def not_found(deployment_id: str) -> GatewayError:
    return GatewayError(
        404, f"No deployment {deployment_id} is visible to this token.", code="not_found"
    )


def authorize(caller: Caller, route: dict, *, method: str) -> None:
    """A token of the deployment's tenant with at least MEMBER role in its project (tenant
    admins and owners in every project); a key of this deployment. Another tenant: 404."""
    if caller.kind == "key":
        return
    if caller.tenant_id != route["tenant_id"]:
        raise not_found(route["id"])
    rank = ROLE_RANK.get(caller.role, 0)
    in_project = rank >= ROLE_RANK[Role.ADMIN] or (
        rank >= ROLE_RANK[Role.MEMBER] and caller.user_id in route.get("members", ())
    )
    if not in_project:
        raise GatewayError(
            403,
            f"You need to be a member of the project of deployment {route['name']} to call it.",
            code="permission_denied",
        )
    if caller.read_only and method != "GET":
        raise GatewayError(403, "This token is read-only.", code="permission_denied")
