"""Who is acting: a user, the tenants they act in (with their role in each), and the token used."""

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID


@dataclass(frozen=True)
class Actor:
    user: Any
    roles: dict[UUID, str] = field(default_factory=dict)
    token: Any = None
    # answers worked out once for this actor: a project membership, asked for by the view's
    # object check and again by the service's authorize. An Actor is made per request; a
    # websocket keeps its handshake's, but its access rechecks each make a fresh one
    # (apps/logs/consumers.py::_fresh_actor)
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def tenant_ids(self) -> list[UUID]:
        return list(self.roles)

    @property
    def read_only(self) -> bool:
        return bool(self.token is not None and self.token.read_only)

    def role_in(self, tenant_id: UUID) -> str | None:
        return self.roles.get(tenant_id)
