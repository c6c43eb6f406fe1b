from rest_framework.routers import SimpleRouter

from apps.compute.api import views


def register(router: SimpleRouter) -> None:
    router.register("clusters", views.ClusterViewSet, basename="cluster")
    router.register("nodes", views.NodeViewSet, basename="node")
    router.register("accelerator-types", views.AcceleratorTypeViewSet, basename="accelerator-type")
