"""Registry endpoints of a tenant's webhooks: /api/v1/webhooks/ and their delivery log."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.registry.api.serializers import (
    WebhookCreatedSerializer,
    WebhookDeliverySerializer,
    WebhookSerializer,
)
from apps.registry.models import Webhook
from apps.registry.webhook_admin import webhook_create, webhook_delete, webhook_update
from apps.tenancy.api.viewsets import PatchOnlyMixin, TenantScopedViewSet


class WebhookViewSet(
    PatchOnlyMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet
):
    """A tenant's webhooks (admins): signed POSTs on model_version.created and alias.changed."""

    resource = "webhook"
    queryset = Webhook.objects.all()
    serializer_class = WebhookSerializer
    ordering_fields = ["created_at"]

    @extend_schema(responses={201: WebhookCreatedSerializer})
    def create(self, request, *args, **kwargs):
        serializer = WebhookSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        hook, secret = webhook_create(
            actor=self.actor,
            tenant=self.write_scope,
            url=data["url"],
            events=data["events"],
            description=data.get("description", ""),
        )
        hook.secret = secret
        return Response(WebhookCreatedSerializer(hook).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, *args, **kwargs):
        hook = self.get_object()
        serializer = WebhookSerializer(hook, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        fields = {
            k: v
            for k, v in serializer.validated_data.items()
            if k in ("url", "events", "active", "description")
        }
        hook = webhook_update(actor=self.actor, webhook=hook, **fields)
        return Response(WebhookSerializer(hook).data)

    def destroy(self, request, *args, **kwargs):
        webhook_delete(actor=self.actor, webhook=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=WebhookDeliverySerializer(many=True))
    @action(detail=True, methods=["get"], policy_action="read")
    def deliveries(self, request, pk=None):
        """The delivery log: each event sent, its state, tries, response code and error."""
        hook = self.get_object()
        page = self.paginate_queryset(hook.deliveries.order_by("-created_at"))
        return self.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)
