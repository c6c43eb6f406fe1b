"""Registry endpoints of models: /api/v1/models/ (list, read, create, edit, delete, archive);
the versions' and aliases' routes are actions mixed in from their own modules."""

from functools import lru_cache

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response

from apps.core.api.parsers import JSONParser
from apps.registry.api.serializers import ModelUpdateSerializer, RegisteredModelSerializer
from apps.registry.api.views.aliases import AliasActions
from apps.registry.api.views.versions import OctetStreamParser, VersionActions
from apps.registry.deliveries import with_webhook_flag
from apps.registry.models import RegisteredModel
from apps.registry.versions import model_create, model_delete, model_update
from apps.tenancy.api.lifecycle import LifecycleMixin
from apps.tenancy.api.viewsets import PatchOnlyMixin, TenantScopedViewSet

WEBHOOK_EVENTS = {"versions", "commit", "alias"}  # actions that may tell the webhooks
# routes that use the model's own row and its project (for the role rule), not its tenant's
# row or its creator: a smaller query to build and read
PROJECT_ONLY = {("versions", "GET"), ("version", "GET"), ("lineage", "GET"), ("alias", "PUT")}


@lru_cache(maxsize=64)  # bounded: the method is what the client sent
def _model_rows(action: str | None, method: str):
    """The models as `action` reads them, before the actor's scope: built once a process
    (the annotations cost more to resolve than PostgreSQL takes to run them). Never
    evaluated: callers take a copy (`.all()`)."""
    rows = RegisteredModelViewSet.queryset
    if action == "retrieve":  # the model with its aliases: one query
        rows = RegisteredModelSerializer.with_aliases(rows)
    if (action, method) in PROJECT_ONLY:
        rows = rows.select_related(None).select_related("project")
    if action in WEBHOOK_EVENTS and method not in SAFE_METHODS:
        rows = with_webhook_flag(rows)
    return rows


class RegisteredModelViewSet(
    VersionActions,
    AliasActions,
    LifecycleMixin,
    PatchOnlyMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet,
):
    """Models of a project and everything below them. Version routes are actions on the
    model: the model is the object the role matrix and the project rule are checked on."""

    resource = "model"
    scope_field = "project"
    queryset = RegisteredModel.objects.select_related("project__tenant", "created_by")
    serializer_class = RegisteredModelSerializer
    filterset_fields = ["project", "name"]
    ordering_fields = ["name", "created_at"]
    parser_classes = [JSONParser, MultiPartParser, OctetStreamParser]

    def get_queryset(self):
        return self.restrict(_model_rows(self.action, self.request.method).all())

    # -- models ---------------------------------------------------------------------------------

    def create(self, request, *args, **kwargs):
        serializer = RegisteredModelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        model = model_create(
            actor=self.actor,
            project=self.write_scope,
            name=data["name"],
            description=data.get("description", ""),
            tags=data.get("tags"),
        )
        return Response(RegisteredModelSerializer(model).data, status=status.HTTP_201_CREATED)

    @extend_schema(request={"application/json": ModelUpdateSerializer})
    def partial_update(self, request, *args, **kwargs):
        model = self.get_object()
        # JSON only: the view's other parsers are for version uploads, and a form's body
        # that is not an object would otherwise change nothing and answer 200 (no body at
        # all, and so no content type, changes nothing: 200)
        kind = request.content_type.split(";")[0].strip()
        if kind and kind != "application/json":
            raise UnsupportedMediaType(request.content_type)
        serializer = ModelUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        model = model_update(actor=self.actor, model=model, **serializer.validated_data)
        return Response(RegisteredModelSerializer(model).data)

    def destroy(self, request, *args, **kwargs):
        model = self.get_object()
        self.destroy_checked(model)  # a model with versions is archived instead
        model_delete(actor=self.actor, model=model)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        context = RegisteredModelSerializer.page_context(page)
        return self.get_paginated_response(
            RegisteredModelSerializer(page, many=True, context=context).data
        )
