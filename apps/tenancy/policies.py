"""Who may do what, in one module: the role matrix, the rules finer than a role, and the
resources that are not tenant data. docs/access.md renders the same table.

Applied to every API action by one layer (apps/tenancy/api/permissions.py::MatrixPermission, a
default DRF permission class) and called by the jobs services at their boundary, through the
same `authorize()`; no view or service writes its own role check.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Q

from apps.core.actor import Actor
from apps.tenancy.models import ROLE_RANK, Role

# (resource, action) -> the lowest tenant role that may do it.
MATRIX: dict[tuple[str, str], Role] = {
    ("tenant", "read"): Role.VIEWER,
    ("tenant", "update"): Role.OWNER,
    ("membership", "read"): Role.VIEWER,  # e-mail and name: admins only (serializers)
    ("membership", "update"): Role.ADMIN,
    ("membership", "delete"): Role.ADMIN,
    # People join by invitation only; the invitee accepts it (signed in, not yet a member).
    ("invitation", "read"): Role.ADMIN,
    ("invitation", "create"): Role.ADMIN,
    ("invitation", "delete"): Role.ADMIN,
    ("project", "read"): Role.VIEWER,
    ("project", "create"): Role.ADMIN,
    ("project", "update"): Role.ADMIN,
    ("project", "delete"): Role.ADMIN,
    ("project", "archive"): Role.ADMIN,
    ("project", "restore"): Role.ADMIN,
    ("project-member", "read"): Role.VIEWER,
    ("project-member", "create"): Role.ADMIN,
    ("project-member", "delete"): Role.ADMIN,
    # Everyone manages their own tokens; admins also see and revoke everyone's.
    ("token", "read"): Role.VIEWER,
    ("token", "create"): Role.VIEWER,
    ("token", "delete"): Role.VIEWER,
    ("token", "manage-others"): Role.ADMIN,
    ("audit-event", "read"): Role.ADMIN,
    # Jobs: members run them in projects they belong to, and cancel and restart their own
    # (the rules below); admins and owners do all of it in every project. "create" covers one
    # job and a batch.
    ("job", "read"): Role.VIEWER,
    ("job", "logs"): Role.VIEWER,  # its output file, and the live view /ws/jobs/{id}/
    ("job", "metrics"): Role.VIEWER,
    ("job", "create"): Role.MEMBER,
    ("job", "cancel"): Role.MEMBER,
    ("job", "restart"): Role.MEMBER,
    ("quota", "read"): Role.VIEWER,
    ("quota", "create"): Role.ADMIN,
    ("quota", "update"): Role.ADMIN,
    ("quota", "delete"): Role.ADMIN,
    ("usage", "read"): Role.VIEWER,
    ("usage", "export"): Role.VIEWER,
    # Datasets (docs/datasets.md): members create them and open, fill and commit versions in
    # projects they belong to (the rule below); admins delete; viewers read and download.
    ("dataset", "read"): Role.VIEWER,
    ("dataset", "create"): Role.MEMBER,
    ("dataset", "upload"): Role.MEMBER,
    ("dataset", "commit"): Role.MEMBER,
    ("dataset", "update"): Role.MEMBER,
    ("dataset", "delete"): Role.ADMIN,
    ("dataset", "archive"): Role.ADMIN,
    ("dataset", "restore"): Role.ADMIN,
    ("logs", "search"): Role.VIEWER,
    ("logs", "context"): Role.VIEWER,
    ("failure-signature", "read"): Role.VIEWER,
    ("failure-signature", "stats"): Role.VIEWER,
    ("failure-signature", "create"): Role.ADMIN,
    ("failure-signature", "update"): Role.ADMIN,
    ("failure-signature", "delete"): Role.ADMIN,
    # Model registry (docs/registry.md): members register, alias and stage models of their
    # projects (the rule below); admins delete them and manage the tenant's webhooks.
    ("model", "read"): Role.VIEWER,
    ("model", "download"): Role.VIEWER,
    ("model", "create"): Role.MEMBER,
    ("model", "create-version"): Role.MEMBER,
    ("model", "update"): Role.MEMBER,
    ("model", "alias"): Role.MEMBER,
    ("model", "stage"): Role.MEMBER,
    ("model", "delete"): Role.ADMIN,
    ("model", "archive"): Role.ADMIN,
    ("model", "restore"): Role.ADMIN,
    ("lineage", "read"): Role.VIEWER,
    ("webhook", "read"): Role.ADMIN,
    ("webhook", "create"): Role.ADMIN,
    ("webhook", "update"): Role.ADMIN,
    ("webhook", "delete"): Role.ADMIN,
    # Model deployments (docs/serving.md): members deploy the models of their projects, scale,
    # update and remove those deployments and make their gateway keys (the rule below).
    ("deployment", "read"): Role.VIEWER,
    ("deployment", "create"): Role.MEMBER,
    ("deployment", "update"): Role.MEMBER,
    ("deployment", "delete"): Role.MEMBER,
    ("deployment", "archive"): Role.MEMBER,
    ("deployment", "restore"): Role.ADMIN,
    ("deployment", "keys"): Role.MEMBER,
    # Project secrets (docs/security.md, Job secrets): everyone lists the names; members set
    # and delete them in their projects (the rule below). No role ever reads a value.
    ("secret", "read"): Role.VIEWER,
    ("secret", "update"): Role.MEMBER,
    ("secret", "delete"): Role.MEMBER,
    # Notification subscriptions: everyone makes, reads and removes their own (ROW_FILTERS).
    ("subscription", "read"): Role.VIEWER,
    ("subscription", "create"): Role.VIEWER,
    ("subscription", "delete"): Role.VIEWER,
    # The tenant's notification defaults: every member reads them, admins set them.
    ("notification_default", "read"): Role.VIEWER,
    ("notification_default", "create"): Role.ADMIN,
    ("notification_default", "delete"): Role.ADMIN,
}

# Actions that only read: the only ones a read-only token may do.
READ_ACTIONS = frozenset(
    {"read", "logs", "metrics", "export", "search", "context", "stats", "download"}
)

# Not tenant data: every signed-in user may do these (clusters, nodes and accelerator types are
# platform infrastructure, written by operators in /admin/; "account" is the caller's own
# session: who am I, sign out).
SIGNED_IN: frozenset[tuple[str, str]] = frozenset(
    {
        ("cluster", "read"),
        ("node", "read"),
        ("accelerator-type", "read"),
        ("account", "read"),
        ("account", "logout"),
        ("invitation", "accept"),  # bound to the invited person (apps/tenancy/services.py)
        ("fit", "estimate"),  # a memory estimate from a config the caller sends; nothing stored
    }
)


def has_role(actor: Actor, *, tenant_id, minimum: Role) -> bool:
    role = actor.role_in(tenant_id)
    return role is not None and ROLE_RANK[Role(role)] >= ROLE_RANK[minimum]


# -- rules finer than a tenant role ------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A named rule on one object (the target), checked after the matrix allowed the role."""

    check: Callable[[Actor, Any], bool]
    message: str


RULES: dict[tuple[str, str], Rule] = {}


def _rule(*keys: tuple[str, str], message: str):
    def register(check: Callable[[Actor, Any], bool]):
        for key in keys:
            RULES[key] = Rule(check=check, message=message)
        return check

    return register


@_rule(
    ("job", "create"), message="You need to be a member of project {target.slug} to run jobs in it."
)
def runs_jobs_in_project(actor: Actor, project) -> bool:
    """Members run jobs in the projects they belong to; admins and owners in every project."""
    if has_role(actor, tenant_id=project.tenant_id, minimum=Role.ADMIN):
        return True
    key = ("member", project.pk)
    if key not in actor.memo:
        actor.memo[key] = project.members.filter(user_id=actor.user.pk).exists()
    return actor.memo[key]


@_rule(
    ("job", "cancel"),
    ("job", "restart"),
    message="Only the job's owner or a tenant admin can do that.",
)
def owns_job_or_admin(actor: Actor, job) -> bool:
    """Members cancel and restart their own jobs; admins and owners anyone's."""
    return job.user_id == actor.user.pk or has_role(
        actor, tenant_id=job.tenant_id, minimum=Role.ADMIN
    )


@_rule(
    ("model", "create-version"),
    ("model", "update"),
    ("model", "alias"),
    ("model", "stage"),
    message="You need to be a member of the model's project to change it.",
)
def works_in_models_project(actor: Actor, target) -> bool:
    """Members register and change models in the projects they belong to; admins and owners
    in every project."""
    model = getattr(target, "model", target)  # a version, a model or a project
    return runs_jobs_in_project(actor, getattr(model, "project", model))


@_rule(
    ("deployment", "create"),
    ("deployment", "update"),
    ("deployment", "delete"),
    ("deployment", "archive"),
    ("deployment", "keys"),
    message="You need to be a member of the deployment's project to change it.",
)
def works_in_deployments_project(actor: Actor, target) -> bool:
    """Members deploy in the projects they belong to; admins and owners in every project.
    The target is a project (create) or a deployment."""
    return runs_jobs_in_project(actor, getattr(target, "project", target))


RULES[("secret", "update")] = RULES[("secret", "delete")] = Rule(
    check=runs_jobs_in_project,
    message="You need to be a member of project {target.slug} to change its secrets.",
)

RULES[("model", "create")] = Rule(
    check=runs_jobs_in_project,
    message="You need to be a member of project {target.slug} to register models in it.",
)


@_rule(
    ("token", "read"),
    ("token", "delete"),
    message="Only the token's owner or a tenant admin can do that.",
)
def owns_token_or_manages(actor: Actor, token) -> bool:
    """Everyone manages their own tokens; admins and owners everyone's in their tenant."""
    return token.user_id == actor.user.pk or allowed(
        actor, resource="token", action="manage-others", tenant_id=token.tenant_id
    )


def token_rows(actor: Actor) -> Q:
    """The tokens an actor may see at all (others' are a 404 below admin): theirs, and every
    token of the tenants where they manage others'."""
    managed = tenants_allowed(actor, resource="token", action="manage-others")
    return Q(user_id=actor.user.pk) | Q(tenant_id__in=managed)


@_rule(
    ("dataset", "create"),
    ("dataset", "upload"),
    ("dataset", "commit"),
    ("dataset", "update"),
    message="You need to be a member of the dataset's project to change it.",
)
def writes_datasets_in_project(actor: Actor, target) -> bool:
    """Members write datasets of the projects they belong to; admins and owners of every
    project. The target is a project (create), a dataset or a version."""
    dataset = getattr(target, "dataset", target)
    return runs_jobs_in_project(actor, getattr(dataset, "project", dataset))


# Resources whose rows are narrower than the tenant: resource -> Q over the rows.
ROW_FILTERS: dict[str, Callable[[Actor], Q]] = {
    "token": token_rows,
    "subscription": lambda actor: Q(user_id=actor.user.pk),  # one's own only, even an owner
}


# -- the decision ------------------------------------------------------------------------------


def allowed(actor: Actor, *, resource: str, action: str, tenant_id, target: Any = None) -> bool:
    try:
        authorize(actor, resource=resource, action=action, tenant_id=tenant_id, target=target)
    except PermissionDenied:
        return False
    return True


def authorize(actor: Actor, *, resource: str, action: str, tenant_id, target: Any = None) -> None:
    """Raise PermissionDenied unless `actor` may do (resource, action) in the tenant: the
    read-only token check, the matrix, then the resource's finer rule on `target` (the object,
    or for a create the project or tenant it names) when there is one."""
    if actor.read_only and action not in READ_ACTIONS:
        raise PermissionDenied("This access token is read-only.")
    needed = MATRIX[(resource, action)]
    if not has_role(actor, tenant_id=tenant_id, minimum=needed):
        raise PermissionDenied(
            f"You need the {needed.value} role in this tenant to {action} {resource}s."
        )
    rule = RULES.get((resource, action))
    if rule is not None and target is not None and not rule.check(actor, target):
        raise PermissionDenied(rule.message.format(target=target))


def tenants_allowed(actor: Actor, *, resource: str, action: str) -> list:
    """The actor's tenants where the role allows (resource, action): what a list shows."""
    return [
        tenant_id
        for tenant_id in actor.tenant_ids
        if allowed(actor, resource=resource, action=action, tenant_id=tenant_id)
    ]


def authorize_any(actor: Actor, *, resource: str, action: str) -> list:
    """For an action over all the actor's tenants (a list, a search, a report): the tenants
    where it is allowed; PermissionDenied when the actor has tenants and none allows it."""
    tenants = tenants_allowed(actor, resource=resource, action=action)
    if actor.tenant_ids and not tenants:
        authorize(actor, resource=resource, action=action, tenant_id=actor.tenant_ids[0])
    return tenants
