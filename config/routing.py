"""Websocket routes (under /ws/); each app contributes its consumers here."""

from django.urls import path

from apps.tenancy.consumers import WhoAmIConsumer

websocket_urlpatterns = [
    path("ws/me/", WhoAmIConsumer.as_asgi()),
]
