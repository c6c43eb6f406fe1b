"""Request guards that run before any view."""

from django.conf import settings

from apps.core.api.errors import json_error


class BodySizeLimitMiddleware:
    """Refuse bodies over TORUS_MAX_BODY_BYTES with 413 before anything reads them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            return json_error(400, "Content-Length must be an integer.")
        limit = settings.TORUS_MAX_BODY_BYTES
        if length > limit:
            return json_error(413, f"Request body is {length} bytes; the limit is {limit}.")
        return self.get_response(request)
