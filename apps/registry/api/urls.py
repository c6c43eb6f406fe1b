from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.registry.api import views


def register(router: SimpleRouter) -> None:
    router.register("models", views.RegisteredModelViewSet, basename="model")
    router.register("webhooks", views.WebhookViewSet, basename="webhook")


urlpatterns = [
    path(
        "dataset-versions/<uuid:pk>",
        views.DatasetVersionLineageView.as_view(),
        name="lineage-dataset-version",
    ),
]
