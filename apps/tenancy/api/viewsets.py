"""The base viewset for tenant-owned resources: scoping and the role check can't be forgotten."""

from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.generics import get_object_or_404

from apps.core.actor import Actor
from apps.tenancy.access import actor_for, client_ip
from apps.tenancy.api.permissions import matrix_action, restrict


class PatchOnlyMixin:
    """PUT behaves as PATCH (and stays out of the schema): resources are edited field by field."""

    @extend_schema(exclude=True)
    def update(self, request, *args, **kwargs):
        return self.partial_update(request, *args, **kwargs)


class TenantScopedViewSet(viewsets.GenericViewSet):
    """Subclasses set `queryset` (a TenantModel queryset) and `resource` (a policy name); a
    custom action names its matrix action: `@action(..., policy_action="cancel")`.

    Authorisation is apps/tenancy/api/permissions.py::MatrixPermission (every view has it):
    get_queryset() restricts rows to what the actor may see (another tenant's object is a 404);
    objects are checked against the matrix and the finer rules; a create's tenant or project
    (`scope_field`, per item of `scope_items` for a batch) is resolved and checked before the
    view runs, and handed to it as `write_scopes`.
    """

    resource: str = ""
    policy_action: str | None = None
    scope_field: str = "tenant"
    scope_items: str | None = None
    write_scopes: list = []

    @property
    def actor(self) -> Actor:
        return actor_for(self.request)

    @property
    def ip(self) -> str | None:
        return client_ip(self.request)

    @property
    def write_scope(self):
        """The one tenant or project a (single) create names, checked by the layer."""
        (scope,) = self.write_scopes
        return scope

    def restrict(self, queryset):
        """Rows of any tenant model this action may show (for a view's secondary queries)."""
        return restrict(
            queryset,
            actor=self.actor,
            resource=self.resource,
            action=matrix_action(self, self.request),
            listing=not self.detail,
        )

    def get_queryset(self):
        return self.restrict(super().get_queryset())

    def get_object(self):
        """The row by its key among those this action may see. The listing's filters and
        ordering (django-filter builds a FilterSet per call) play no part in finding it."""
        key = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        obj = get_object_or_404(self.get_queryset(), **{self.lookup_field: key})
        self.check_object_permissions(self.request, obj)
        return obj
