from rest_framework.routers import SimpleRouter

from apps.serving.api import views


def register(router: SimpleRouter) -> None:
    router.register("deployments", views.DeploymentViewSet, basename="deployment")
