"""Top-level URLs: the admin, health probes, Prometheus's /metrics, the OpenAPI schema and
/api/v1."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from apps.core.health import healthz, readyz
from apps.core.scrape import metrics
from config import ui

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("config.api_urls")),
    *ui.urlpatterns,  # the browser UI at / and its client routes (last)
]

handler404 = "apps.core.api.errors.not_found_view"
handler500 = "apps.core.api.errors.server_error_view"
