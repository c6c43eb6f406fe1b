"""The registry's API routes: models (with their versions and aliases), webhooks, lineage."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.registry.api.views.lineage import DatasetVersionLineageView
from apps.registry.api.views.models import RegisteredModelViewSet
from apps.registry.api.views.webhooks import WebhookViewSet


def register(router: SimpleRouter) -> None:
    router.register("models", RegisteredModelViewSet, basename="model")
    router.register("webhooks", WebhookViewSet, basename="webhook")


urlpatterns = [
    path(
        "dataset-versions/<uuid:pk>",
        DatasetVersionLineageView.as_view(),
        name="lineage-dataset-version",
    ),
]
