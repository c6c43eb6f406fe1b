"""GET /metrics: the operators' metrics (apps/core/telemetry.py) for Prometheus, behind the
scrape token (`Authorization: Bearer <token>`, the token in TORUS_METRICS_TOKEN_FILE). No
token configured, or another one: 403, and nothing is read."""

import hmac

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from apps.core import telemetry


def _token() -> str:
    try:
        with open(settings.TORUS_METRICS_TOKEN_FILE) as file:
            return file.readline().strip()
    except OSError:
        return ""


def _refused(message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": "permission_denied", "message": message}}, status=403)


@require_GET
def metrics(request):
    token = _token()
    if not token:
        return _refused("No scrape token is configured (TORUS_METRICS_TOKEN_FILE).")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
        return _refused("Send the scrape token: Authorization: Bearer <token>.")
    return HttpResponse(telemetry.render(), content_type=CONTENT_TYPE_LATEST)
