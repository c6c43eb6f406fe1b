from rest_framework.routers import SimpleRouter

from apps.secrets.api import views


def register(router: SimpleRouter) -> None:
    # `pk`: the project's id (the route walk and the schema fill it as a project's)
    router.register(
        r"projects/(?P<pk>[^/.]+)/secrets", views.ProjectSecretViewSet, basename="project-secret"
    )
