"""/api/v1/projects/{id}/secrets/: a project's secrets by name. Values go in (PUT) and never
come out: no route, role or serializer returns one."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from apps.core.api.validation import validated
from apps.secrets import selectors, services
from apps.secrets.api.serializers import SecretSerializer, SecretValueSerializer
from apps.secrets.models import ProjectSecret
from apps.tenancy.api.viewsets import TenantScopedViewSet

PROJECT = OpenApiParameter(
    "id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Project id."
)
NAME = OpenApiParameter("name", OpenApiTypes.STR, OpenApiParameter.PATH, description="Secret name.")


class ProjectSecretViewSet(TenantScopedViewSet):
    """Viewers list names; project members, tenant admins and owners set and delete."""

    resource = "secret"
    queryset = ProjectSecret.objects.none()  # rows come from the project (selectors)
    serializer_class = SecretSerializer
    lookup_field = "name"
    lookup_value_regex = r"[^/.]+"
    filter_backends: list = []

    def _project(self):
        """The URL's project among the actor's (404 otherwise), checked against the matrix
        and the project rule for this action."""
        project = selectors.project_for(actor=self.actor, project_id=self.kwargs["pk"])
        self.check_object_permissions(self.request, project)
        return project

    @extend_schema(parameters=[PROJECT])
    def list(self, request, *args, **kwargs):
        project = self._project()
        page = self.paginate_queryset(selectors.secret_list(project=project))
        return self.get_paginated_response(SecretSerializer(page, many=True).data)

    @extend_schema(
        parameters=[PROJECT, NAME],
        request=SecretValueSerializer,
        responses={200: SecretSerializer, 201: SecretSerializer},
    )
    def update(self, request, *args, **kwargs):
        project = self._project()
        body = validated(SecretValueSerializer, request.data)
        secret, created = services.secret_set(
            actor=self.actor,
            project=project,
            name=self.kwargs["name"],
            value=body["value"],
            ip=self.ip,
        )
        return Response(
            SecretSerializer(secret).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(parameters=[PROJECT, NAME], responses={204: None})
    def destroy(self, request, *args, **kwargs):
        project = self._project()
        secret = selectors.secret_get(project=project, name=self.kwargs["name"])
        services.secret_delete(actor=self.actor, secret=secret, ip=self.ip)
        return Response(status=status.HTTP_204_NO_CONTENT)
