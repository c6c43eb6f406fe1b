"""One error shape for every error: {"error": {"code", "message", "fields"}}."""

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from apps.core.exceptions import Conflict, Unavailable

logger = logging.getLogger(__name__)

CODES = {
    400: "invalid",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "throttled",
    500: "server_error",
    503: "unavailable",
}


class ConflictError(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "payload_too_large"


def error_body(status_code: int, message: str, *, code: str | None = None, fields=None) -> dict:
    return {
        "error": {
            "code": code or CODES.get(status_code, "error"),
            "message": message,
            "fields": fields or {},
        }
    }


def _flatten(detail) -> list[str] | dict:
    """Turn DRF's nested ErrorDetail structures into lists of plain strings per field."""
    if isinstance(detail, dict):
        return {str(key): _flatten(value) for key, value in detail.items()}
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return [str(item) for item in detail]
        return [_flatten(item) for item in detail]
    return [str(detail)]


def _validation_body(detail) -> dict:
    if isinstance(detail, dict):
        fields = _flatten(detail)
        general = fields.pop("non_field_errors", None)
        if general:
            message = "; ".join(str(m) for m in general)
        else:
            first = next(iter(fields), None)
            message = f"Invalid input: {first}: {_first_message(fields[first])}" if first else ""
        return error_body(400, message or "Invalid input.", fields=fields)
    messages = _flatten(detail)
    return error_body(400, "; ".join(str(m) for m in messages) or "Invalid input.")


def _first_message(value) -> str:
    while isinstance(value, list | dict):
        if not value:
            return ""
        value = next(iter(value.values())) if isinstance(value, dict) else value[0]
    return str(value)


def _in_use(exc: ProtectedError) -> str:
    """'Still in use by deployment tiny, ...': what must go first, by name."""
    names = sorted({f"{obj._meta.verbose_name} {obj}" for obj in exc.protected_objects})
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return f"Still in use by {', '.join(names[:5])}{more}: remove those first."


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        detail = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(detail)
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, Conflict):
        exc = ConflictError(str(exc) or None)
    elif isinstance(exc, ProtectedError):  # e.g. a model a deployment still serves
        exc = ConflictError(_in_use(exc))
    elif isinstance(exc, Unavailable):
        logger.warning("unavailable: %s", exc)
        body = error_body(503, exc.message, code=exc.code)
        return Response(body, status=503, headers={"Retry-After": "30"})

    response = drf_exception_handler(exc, context)
    if response is None:
        logger.exception("unhandled error in %s", context.get("view"), exc_info=exc)
        return Response(error_body(500, "Internal server error."), status=500)

    if isinstance(exc, exceptions.ValidationError):
        response.data = _validation_body(exc.detail)
        return response

    detail = getattr(exc, "detail", "")
    message = str(detail) if not isinstance(detail, dict | list) else "Request failed."
    code = CODES.get(response.status_code)
    if isinstance(exc, exceptions.ParseError):
        code = "malformed_body"
    response.data = error_body(response.status_code, message, code=code)
    return response


def json_error(status_code: int, message: str, **headers) -> JsonResponse:
    response = JsonResponse(error_body(status_code, message), status=status_code)
    for key, value in headers.items():
        response[key] = value
    return response


def not_found_view(request, exception=None):
    return json_error(404, "Not found.")


def server_error_view(request):
    return json_error(500, "Internal server error.")
