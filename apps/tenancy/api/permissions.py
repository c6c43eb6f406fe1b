"""The one authorisation layer of the API: every view, every action, through the policy module.

`MatrixPermission` is a default DRF permission class (settings.REST_FRAMEWORK), so no view can
forget it. A view declares only its `resource` and, for a custom action, the matrix action
(`@action(..., policy_action="cancel")`; an APIView sets `policy_action`). Then:

- object routes (retrieve, update, delete, detail actions): the tenant and the finer rule's
  target come from the object (DRF calls has_object_permission from get_object(); the
  queryset is already restricted to the actor's tenants, so another tenant's object is a 404);
- create: the tenant or project named in the request body (`scope_field`; a batch names one
  per item), resolved here: another tenant's project is a 404; the view reads the resolved
  objects from `view.write_scopes`;
- everything else (lists, searches, reports): the role must allow the action in at least one of
  the actor's tenants, and lists show only those tenants (`restrict`).

A view without a resource, or an action missing from the matrix, is refused (fail closed).
"""

import uuid

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.http import Http404
from rest_framework.exceptions import ValidationError as BodyError
from rest_framework.permissions import SAFE_METHODS, BasePermission

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.tenancy import policies
from apps.tenancy.access import actor_for
from apps.tenancy.lifecycle import archived_refusal

# Writes an archived thing still takes: its own archive (409 from the service) and restore.
LIFECYCLE_ACTIONS = frozenset({"archive", "restore"})

# DRF's own actions -> the matrix action.
CRUD_ACTIONS = {
    "list": "read",
    "retrieve": "read",
    "metadata": "read",
    "create": "create",
    "update": "update",
    "partial_update": "update",
    "destroy": "delete",
}


def matrix_action(view, request) -> str:
    """The policy action of this request."""
    declared = getattr(view, "policy_action", None)
    if isinstance(declared, dict):  # one route, an action per method: {"get": ..., "post": ...}
        declared = declared.get(request.method.lower())
    if declared:
        return declared
    action = getattr(view, "action", None)
    if action in CRUD_ACTIONS:
        return CRUD_ACTIONS[action]
    if action is None and (request.method in SAFE_METHODS or hasattr(view, "action_map")):
        return "read"  # OPTIONS, or a method the viewset does not route (405 follows)
    raise ImproperlyConfigured(
        f"{type(view).__name__}.{action} declares no policy_action (the matrix action)."
    )


def restrict(queryset, *, actor: Actor, resource: str, action: str, listing: bool):
    """NetBox's restrict(user, action): the rows an actor may see for (resource, action).
    Always the actor's tenants and the resource's row rule; a listing also only the tenants
    whose role allows the action."""
    queryset = queryset.visible_to(actor)
    rows = policies.ROW_FILTERS.get(resource)
    if rows is not None:
        queryset = queryset.filter(rows(actor))
    if listing:
        tenants = policies.tenants_allowed(actor, resource=resource, action=action)
        queryset = queryset.filter(**{f"{queryset.model.tenant_path}__in": tenants})
    return queryset


class MatrixPermission(BasePermission):
    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        resource = getattr(view, "resource", "")
        if not resource:
            raise ImproperlyConfigured(f"{type(view).__name__} declares no policy resource.")
        action = matrix_action(view, request)
        if (resource, action) in policies.SIGNED_IN:
            return True
        if (resource, action) not in policies.MATRIX:
            raise ImproperlyConfigured(f"({resource!r}, {action!r}) is not in the role matrix.")
        actor = actor_for(request)
        if actor.read_only and action not in policies.READ_ACTIONS:  # before reading the body
            policies.authorize(actor, resource=resource, action=action, tenant_id=None)
        if getattr(view, "detail", False):
            return True  # decided on the object, in has_object_permission
        if action == "create":
            view.write_scopes = write_scopes(view, request, actor)
            for target in view.write_scopes:
                policies.authorize(
                    actor,
                    resource=resource,
                    action=action,
                    tenant_id=target.tenant_id_value,
                    target=target,
                )
            archived_scopes_refuse(view, request, view.write_scopes)
            return True
        policies.authorize_any(actor, resource=resource, action=action)
        return True

    def has_object_permission(self, request, view, obj) -> bool:
        action = matrix_action(view, request)
        if (view.resource, action) in policies.SIGNED_IN:
            return True
        policies.authorize(
            actor_for(request),
            resource=view.resource,
            action=action,
            tenant_id=obj.tenant_id_value,
            target=obj,
        )
        if action not in policies.READ_ACTIONS and action not in LIFECYCLE_ACTIONS:
            refusal = archived_refusal(obj)
            if refusal:
                raise Conflict(refusal)
        return True


def archived_scopes_refuse(view, request, scopes: list) -> None:
    """Nothing is created in an archived tenant or project: 400 at the field that names it
    (per item of a batch)."""
    refusals = {str(scope.pk): archived_refusal(scope) for scope in scopes}
    if not any(refusals.values()):
        return
    field = getattr(view, "scope_field", "tenant")
    items_key = getattr(view, "scope_items", None)
    if not items_key:
        raise BodyError({field: [next(r for r in refusals.values() if r)]})
    errors = {}
    for index, item in enumerate(request.data[items_key]):
        refusal = refusals.get(str(uuid.UUID(str(item.get(field)))))
        if refusal:
            errors[str(index)] = {field: [refusal]}
    raise BodyError({items_key: errors})


def write_scopes(view, request, actor: Actor) -> list:
    """The tenants or projects a create names, resolved among the actor's own: a tenant by id
    or slug (or the only one), a project by id (another tenant's project is a 404)."""
    from apps.tenancy.models import Project
    from apps.tenancy.selectors import tenant_for_write

    data = request.data if isinstance(request.data, dict) else {}
    field = getattr(view, "scope_field", "tenant")
    items_key = getattr(view, "scope_items", None)
    items = data.get(items_key) if items_key else [data]
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        return []  # malformed: the view's serializer answers 400, nothing is created
    if field == "tenant":
        scopes = []
        for item in items:
            ref = item.get("tenant")
            if ref is not None and (not isinstance(ref, str) or "\x00" in ref):
                # not a name PostgreSQL can even compare (NUL) or not a string at all
                raise BodyError({"tenant": ["A tenant id or slug."]})
            try:
                scopes.append(tenant_for_write(actor=actor, ref=ref))
            except ValidationError:
                if item.get("tenant") in (None, ""):
                    raise  # several tenants and none named: 400
                raise Http404("Tenant not found.") from None
        return scopes
    refs: list[uuid.UUID] = []
    errors = {}
    for index, item in enumerate(items):
        try:
            refs.append(uuid.UUID(str(item.get(field))))
        except ValueError:
            message = "This field is required." if item.get(field) in (None, "") else "Not a UUID."
            errors[str(index)] = {field: [message]}
    if errors:  # DRF's error: Django's cannot nest per-item messages (`jobs.0.project`)
        raise BodyError({items_key: errors} if items_key else errors["0"])
    found = Project.objects.visible_to(actor).select_related("tenant").in_bulk(set(refs))
    if set(refs) - set(found):
        raise Http404("Project not found.")
    return [found[ref] for ref in dict.fromkeys(refs)]
