from rest_framework.routers import SimpleRouter

from apps.jobs.api import views


def register(router: SimpleRouter) -> None:
    router.register("jobs", views.JobViewSet, basename="job")
