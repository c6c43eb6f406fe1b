"""Request guards that run before any view."""

from django.conf import settings

from apps.core.api.errors import json_error
from apps.core.streaming import streams_body


class BodySizeLimitMiddleware:
    """Refuse bodies over TORUS_MAX_BODY_BYTES with 413 before anything reads them (routes
    that stream their body to storage, apps/core/streaming.py, bound their reads instead)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if streams_body(request.path, request.method):
            return self.get_response(request)
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            return json_error(400, "Content-Length must be an integer.")
        limit = settings.TORUS_MAX_BODY_BYTES
        if length > limit:
            return json_error(413, f"Request body is {length} bytes; the limit is {limit}.")
        return self.get_response(request)
