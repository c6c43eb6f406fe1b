"""The logs' routes: /api/v1/logs/ (search and context; included from config/api_urls.py as
path("logs/", include(...))), and `register` for the router's: a job's output on the jobs'
prefix and the failure signatures."""

from django.urls import re_path
from rest_framework.routers import SimpleRouter

from apps.logs.api import views
from apps.logs.api.jobs import JobOutputViewSet
from apps.logs.api.signatures import FailureSignatureViewSet

urlpatterns = [
    re_path(r"^search/?$", views.LogSearchView.as_view(), name="logs-search"),
    re_path(r"^context/?$", views.LogContextView.as_view(), name="logs-context"),
]


def register(router: SimpleRouter) -> None:
    router.register("jobs", JobOutputViewSet, basename="job-output")
    router.register("failure-signatures", FailureSignatureViewSet, basename="failure-signature")
