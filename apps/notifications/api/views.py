"""/api/v1/subscriptions/: a person's notification subscriptions (their own only): list,
read, create, delete; the bell's inbox. /api/v1/notification-defaults/: the tenant's defaults
(every member reads them, admins set and remove them)."""

from django.http import Http404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.api.validation import validated
from apps.jobs.models import Job
from apps.notifications import bell, services
from apps.notifications.api.serializers import (
    NotificationDefaultSerializer,
    SubscriptionCreatedSerializer,
    SubscriptionCreateSerializer,
    SubscriptionSerializer,
)
from apps.notifications.models import NotificationDefault, Subscription
from apps.tenancy.api.filters import TenantFilterMixin
from apps.tenancy.api.viewsets import TenantScopedViewSet
from apps.tenancy.models import Project


class SubscriptionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    resource = "subscription"
    queryset = Subscription.objects.all()
    serializer_class = SubscriptionSerializer
    ordering_fields = ["created_at"]

    @extend_schema(
        request=SubscriptionCreateSerializer, responses={201: SubscriptionCreatedSerializer}
    )
    def create(self, request, *args, **kwargs):
        body = validated(SubscriptionCreateSerializer, request.data)
        tenant = self.write_scope
        project = job = None
        if body.get("project"):
            project = (
                Project.objects.visible_to(self.actor)
                .filter(pk=body["project"], tenant=tenant)
                .first()
            )
            if project is None:
                raise Http404("Project not found.")
        if body.get("job"):
            job = Job.objects.visible_to(self.actor).filter(pk=body["job"], tenant=tenant).first()
            if job is None:
                raise Http404("Job not found.")
        subscription, secret = services.subscription_create(
            actor=self.actor,
            tenant=tenant,
            events=body["events"],
            channel=body["channel"],
            address=body["address"],
            project=project,
            job=job,
        )
        subscription.secret = secret
        return Response(
            SubscriptionCreatedSerializer(subscription).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(responses={204: None})
    def destroy(self, request, *args, **kwargs):
        services.subscription_delete(actor=self.actor, subscription=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        responses=inline_serializer(
            "NotificationInbox",
            {"items": serializers.ListField(child=serializers.DictField())},
        )
    )
    @action(detail=False, methods=["get"], policy_action="read", pagination_class=None)
    def inbox(self, request):
        """The bell's latest 50 items of your subscriptions (any channel), newest first: event,
        job, name, project, state, reason, at, tenant. New ones come live on /ws/notifications/."""
        mine = self.filter_queryset(self.get_queryset())
        return Response({"items": bell.inbox(subscriptions=mine)})


class NotificationDefaultFilter(TenantFilterMixin):
    class Meta:
        model = NotificationDefault
        fields = ["tenant"]


class NotificationDefaultViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet
):
    resource = "notification_default"
    queryset = NotificationDefault.objects.all()
    serializer_class = NotificationDefaultSerializer
    filterset_class = NotificationDefaultFilter
    ordering_fields = ["channel"]

    def create(self, request, *args, **kwargs):
        """Set the tenant's default for a channel (made, or its events replaced: 201 either
        way)."""
        body = validated(NotificationDefaultSerializer, request.data)
        row = services.notification_default_set(
            actor=self.actor, tenant=self.write_scope, channel=body["channel"],
            events=body["events"],
        )  # fmt: skip
        return Response(NotificationDefaultSerializer(row).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, *args, **kwargs):
        services.notification_default_delete(actor=self.actor, default=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
