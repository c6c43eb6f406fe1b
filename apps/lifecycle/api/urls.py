from rest_framework.routers import SimpleRouter

from apps.lifecycle.api import views


def register(router: SimpleRouter) -> None:
    router.register("purges", views.PurgeViewSet, basename="purge")
