from rest_framework.routers import SimpleRouter

from apps.datasets.api import views


def register(router: SimpleRouter) -> None:
    router.register("datasets", views.DatasetViewSet, basename="dataset")
    router.register(
        r"datasets/(?P<dataset_pk>[0-9a-f-]{36})/versions",
        views.DatasetVersionViewSet,
        basename="dataset-version",
    )
