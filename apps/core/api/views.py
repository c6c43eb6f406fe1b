"""The base viewset for tenant-owned resources: scoping and the role check can't be forgotten."""

from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.permissions import SAFE_METHODS

from apps.core.actor import Actor
from apps.tenancy.access import actor_for, client_ip
from apps.tenancy.policies import authorize

ACTION_VERBS = {
    "list": "read",
    "retrieve": "read",
    "create": "create",
    "batch": "create",
    "stats": "read",
    "update": "update",
    "partial_update": "update",
    "destroy": "delete",
}


class PatchOnlyMixin:
    """PUT behaves as PATCH (and stays out of the schema): resources are edited field by field."""

    @extend_schema(exclude=True)
    def update(self, request, *args, **kwargs):
        return self.partial_update(request, *args, **kwargs)


class TenantScopedViewSet(viewsets.GenericViewSet):
    """Subclasses set `queryset` (a TenantModel queryset) and `resource` (a policy name).

    get_queryset() always applies TenantQuerySet.visible_to(actor), so another tenant's object
    is a 404; check_object_permissions() applies the role matrix to the object's tenant.
    """

    resource: str = ""

    @property
    def actor(self) -> Actor:
        return actor_for(self.request)

    @property
    def ip(self) -> str | None:
        return client_ip(self.request)

    def get_queryset(self):
        return super().get_queryset().visible_to(self.actor)

    def verb(self) -> str:
        """The policy action of this request: CRUD verbs, "read" for any other safe request,
        else the custom action's own name (e.g. "cancel")."""
        if self.action in ACTION_VERBS:
            return ACTION_VERBS[self.action]
        return "read" if self.request.method in SAFE_METHODS else (self.action or "read")

    def check_object_permissions(self, request, obj):
        super().check_object_permissions(request, obj)
        authorize(
            self.actor, resource=self.resource, action=self.verb(), tenant_id=obj.tenant_id_value
        )
