"""/api/v1/logs/: included from config/api_urls.py as path("logs/", include(...))."""

from django.urls import re_path

from apps.logs.api import views

urlpatterns = [
    re_path(r"^search/?$", views.LogSearchView.as_view(), name="logs-search"),
    re_path(r"^context/?$", views.LogContextView.as_view(), name="logs-context"),
]
