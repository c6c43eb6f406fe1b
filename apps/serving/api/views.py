"""/api/v1/deployments/: list, create, retrieve, patch, delete; events, replicas, keys and
usage of one deployment. Tenant scoping and roles: TenantScopedViewSet (another tenant's
deployment is a 404)."""

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.serving import deployment_keys, selectors, services
from apps.serving.api.serializers import (
    DeploymentCreateSerializer,
    DeploymentEventSerializer,
    DeploymentKeyCreatedSerializer,
    DeploymentKeySerializer,
    DeploymentSerializer,
    DeploymentUpdateSerializer,
    DeploymentUsageSerializer,
    DryRunSerializer,
    KeyCreateSerializer,
    ReplicaSerializer,
)
from apps.serving.models import Deployment
from apps.tenancy.api.lifecycle import LifecycleMixin
from apps.tenancy.api.viewsets import PatchOnlyMixin, TenantScopedViewSet


class DeploymentViewSet(
    LifecycleMixin,
    PatchOnlyMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet,
):
    resource = "deployment"
    scope_field = "project"
    queryset = Deployment.objects.select_related("project", "model", "version", "created_by")
    serializer_class = DeploymentSerializer
    filterset_fields = ["tenant", "project", "name", "state"]
    ordering_fields = ["name", "created_at", "state"]

    def get_queryset(self):
        rows = super().get_queryset()
        if self.action in ("list", "retrieve"):
            rows = DeploymentSerializer.with_counts(rows)
        return rows

    def shown(self, deployment: Deployment) -> dict:
        rows = DeploymentSerializer.with_counts(self.queryset.filter(pk=deployment.pk))
        return DeploymentSerializer(rows.get()).data

    @extend_schema(
        request=DeploymentCreateSerializer,
        responses={201: DeploymentSerializer, 200: DryRunSerializer},
    )
    def create(self, request, *args, **kwargs):
        """A new deployment (201); with `dry_run: true`, the same checks and the fit estimate
        (200), nothing written."""
        serializer = DeploymentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = {k: v for k, v in serializer.validated_data.items() if k != "project"}
        if data.pop("dry_run"):
            checked = services.deployment_check(
                actor=self.actor, project=self.write_scope, data=data
            )
            return Response(checked)
        deployment = services.deployment_create(
            actor=self.actor, project=self.write_scope, data=data
        )
        return Response(self.shown(deployment), status=status.HTTP_201_CREATED)

    @extend_schema(request=DeploymentUpdateSerializer, responses=DeploymentSerializer)
    def partial_update(self, request, *args, **kwargs):
        deployment = self.get_object()
        serializer = DeploymentUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        deployment = services.deployment_update(
            actor=self.actor, deployment=deployment, data=serializer.validated_data
        )
        return Response(self.shown(deployment))

    def destroy(self, request, *args, **kwargs):
        deployment = self.get_object()
        self.destroy_checked(deployment)  # one that ran replicas is archived instead
        services.deployment_delete(actor=self.actor, deployment=deployment)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=DeploymentEventSerializer(many=True))
    @action(detail=True, methods=["get"], policy_action="read")
    def events(self, request, pk=None):
        """The deployment's events, oldest first (scaling decisions carry what they read)."""
        deployment = self.get_object()
        page = self.paginate_queryset(deployment.events.order_by("created_at"))
        return self.get_paginated_response(DeploymentEventSerializer(page, many=True).data)

    @extend_schema(responses=ReplicaSerializer(many=True))
    @action(detail=True, methods=["get"], policy_action="read")
    def replicas(self, request, pk=None):
        """Replicas not yet stopped (`?all=1`: every replica it ever had), oldest first."""
        everything = request.query_params.get("all") in ("1", "true")
        rows = selectors.replicas_of(deployment=self.get_object(), include_stopped=everything)
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(ReplicaSerializer(page, many=True).data)

    @extend_schema(
        request=KeyCreateSerializer,
        responses={200: DeploymentKeySerializer(many=True), 201: DeploymentKeyCreatedSerializer},
    )
    @action(
        detail=True,
        methods=["get", "post"],
        policy_action={"get": "read", "head": "read", "post": "keys"},
    )
    def keys(self, request, pk=None):
        """GET: the deployment's keys (names and prefixes). POST {"name"}: a new `tsk_` key for
        its gateway path; the token is in this answer only."""
        deployment = self.get_object()
        if request.method == "GET":
            rows = deployment.keys.select_related("created_by").order_by("created_at")
            page = self.paginate_queryset(rows)
            return self.get_paginated_response(DeploymentKeySerializer(page, many=True).data)
        serializer = KeyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key, token = deployment_keys.key_create(
            actor=self.actor, deployment=deployment, name=serializer.validated_data["name"]
        )
        key.token = token
        return Response(DeploymentKeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    @action(
        detail=True,
        methods=["delete"],
        url_path=r"keys/(?P<key_id>[0-9a-f-]{36})",
        policy_action="keys",
    )
    def key_revoke(self, request, pk=None, key_id=None):
        """Revoke a key: the gateway refuses it from the next request on."""
        deployment = self.get_object()
        key = deployment.keys.filter(pk=key_id).first()
        if key is None:
            raise Http404("Key not found.")
        key.deployment = deployment
        deployment_keys.key_revoke(actor=self.actor, key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "minutes",
                {"type": "integer", "minimum": 1, "maximum": 1440},
                description="The window: 1-1440 (default 60).",
            )
        ],
        responses=DeploymentUsageSerializer,
    )
    @action(detail=True, methods=["get"], policy_action="read")
    def usage(self, request, pk=None):
        """Requests, latency, time to first token and tokens per minute (the gateway's
        records)."""
        from apps.serving import records

        return Response(
            records.usage_response(deployment=self.get_object(), params=request.query_params)
        )
