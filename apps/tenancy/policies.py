"""Who may do what: the role matrix, in one table (docs/access.md renders the same table)."""

from django.core.exceptions import PermissionDenied

from apps.core.actor import Actor
from apps.tenancy.models import ROLE_RANK, Role

# (resource, action) -> the lowest tenant role that may do it.
MATRIX: dict[tuple[str, str], Role] = {
    ("tenant", "read"): Role.VIEWER,
    ("tenant", "update"): Role.OWNER,
    ("membership", "read"): Role.VIEWER,
    ("membership", "create"): Role.ADMIN,
    ("membership", "update"): Role.ADMIN,
    ("membership", "delete"): Role.ADMIN,
    ("project", "read"): Role.VIEWER,
    ("project", "create"): Role.ADMIN,
    ("project", "update"): Role.ADMIN,
    ("project", "delete"): Role.ADMIN,
    ("project-member", "read"): Role.VIEWER,
    ("project-member", "create"): Role.ADMIN,
    ("project-member", "delete"): Role.ADMIN,
    # Everyone manages their own tokens; admins also see and revoke everyone's.
    ("token", "read"): Role.VIEWER,
    ("token", "create"): Role.VIEWER,
    ("token", "delete"): Role.VIEWER,
    ("token", "manage-others"): Role.ADMIN,
    ("audit-event", "read"): Role.ADMIN,
    # Jobs: members run them in projects they belong to (checked by the jobs service too);
    # their owner or an admin cancels and restarts them.
    ("job", "read"): Role.VIEWER,
    ("job", "create"): Role.MEMBER,
    ("job", "cancel"): Role.MEMBER,
    ("job", "restart"): Role.MEMBER,
    ("quota", "read"): Role.VIEWER,
    ("quota", "create"): Role.ADMIN,
    ("quota", "update"): Role.ADMIN,
    ("quota", "delete"): Role.ADMIN,
    ("usage", "read"): Role.VIEWER,
    ("logs", "read"): Role.VIEWER,
    ("failure-signature", "read"): Role.VIEWER,
    ("failure-signature", "create"): Role.ADMIN,
    ("failure-signature", "update"): Role.ADMIN,
    ("failure-signature", "delete"): Role.ADMIN,
}


def has_role(actor: Actor, *, tenant_id, minimum: Role) -> bool:
    role = actor.role_in(tenant_id)
    return role is not None and ROLE_RANK[Role(role)] >= ROLE_RANK[minimum]


def allowed(actor: Actor, *, resource: str, action: str, tenant_id) -> bool:
    if action != "read" and actor.read_only:
        return False
    return has_role(actor, tenant_id=tenant_id, minimum=MATRIX[(resource, action)])


def authorize(actor: Actor, *, resource: str, action: str, tenant_id) -> None:
    if actor.read_only and action != "read":
        raise PermissionDenied("This access token is read-only.")
    if not allowed(actor, resource=resource, action=action, tenant_id=tenant_id):
        needed = MATRIX[(resource, action)].value
        raise PermissionDenied(
            f"You need the {needed} role in this tenant to {action} {resource}s."
        )
