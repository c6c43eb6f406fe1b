from rest_framework.routers import SimpleRouter

from apps.quotas.api import views


def register(router: SimpleRouter) -> None:
    router.register("quotas", views.QuotaViewSet, basename="quota")
