"""/api/v1: every app contributes its routes to one router."""

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from apps.compute.api.urls import register as register_compute
from apps.datasets.api.urls import register as register_datasets
from apps.jobs.api.urls import register as register_jobs
from apps.lifecycle.api.urls import register as register_lifecycle
from apps.logs.api.urls import register as register_logs
from apps.notifications.api.urls import register as register_notifications
from apps.quotas.api.history import UsageHistoryView
from apps.quotas.api.urls import register as register_quotas
from apps.quotas.api.views import UsageExportView, UsageView
from apps.registry.api.urls import register as register_registry
from apps.secrets.api.urls import register as register_secrets
from apps.serving.api.fit import FitView
from apps.serving.api.urls import register as register_serving
from apps.tenancy.api.urls import register as register_tenancy
from apps.tenancy.api.views import CsrfView, LoginView, LogoutView, MeView

router = SimpleRouter(trailing_slash="/?")
register_tenancy(router)
register_compute(router)
register_quotas(router)
register_jobs(router)
register_datasets(router)
register_registry(router)
register_serving(router)
register_secrets(router)
register_lifecycle(router)
register_logs(router)
register_notifications(router)

urlpatterns = [
    path("auth/csrf", CsrfView.as_view(), name="auth-csrf"),
    path("auth/login", LoginView.as_view(), name="auth-login"),
    path("auth/logout", LogoutView.as_view(), name="auth-logout"),
    path("auth/me", MeView.as_view(), name="auth-me"),
    path("logs/", include("apps.logs.api.urls")),
    path("lineage/", include("apps.registry.api.urls")),
    path("usage/", UsageView.as_view(), name="usage"),
    path("usage/export", UsageExportView.as_view(), name="usage-export"),
    path("usage/history/", UsageHistoryView.as_view(), name="usage-history"),
    path("fit/", FitView.as_view(), name="fit"),
    path("", include(router.urls)),
]
