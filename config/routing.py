"""Websocket routes (under /ws/); each app contributes its consumers here."""

from django.urls import path

from apps.logs.consumers import JobLogConsumer, TenantJobsConsumer
from apps.notifications.consumers import BellConsumer
from apps.tenancy.consumers import WhoAmIConsumer

websocket_urlpatterns = [
    path("ws/me/", WhoAmIConsumer.as_asgi()),
    path("ws/jobs/<str:job_id>/", JobLogConsumer.as_asgi()),
    path("ws/tenants/<str:tenant_id>/jobs/", TenantJobsConsumer.as_asgi()),
    path("ws/notifications/", BellConsumer.as_asgi()),
]
