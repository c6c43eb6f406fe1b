"""OpenAPI generation: every operation documents the shared error envelope for its error codes."""

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.permissions import SAFE_METHODS, AllowAny


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.JSONField(), help_text="Messages per field, for 400 responses."
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


ERROR_DESCRIPTIONS = {
    "400": "Invalid input; `fields` names each bad field and why.",
    "401": "Not authenticated.",
    "403": "Authenticated but not allowed.",
    "404": "Not found (or not visible to this tenant).",
    "405": "Method not allowed.",
    "409": "Conflict with the current state.",
    "413": "Request body too large.",
    "429": "Too many requests; see Retry-After.",
    "500": "Internal server error.",
}
PUBLIC_ERRORS = ("400", "405", "413", "429", "500")
# A public write (sign-in) is CSRF-protected for sessions: a failed check is a 403.
CSRF_FAILED = "Forbidden: the session's CSRF check failed."


class TorusAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        descriptions = dict(ERROR_DESCRIPTIONS)
        if self._requires_auth():
            codes = list(ERROR_DESCRIPTIONS)
        else:
            codes = list(PUBLIC_ERRORS)
            if self.method not in SAFE_METHODS:
                codes.append("403")
                descriptions["403"] = CSRF_FAILED
        for code in codes:
            if code in responses:
                continue
            response = self._get_response_for_code(ErrorSerializer, code, direction=direction)
            response["description"] = descriptions[code]
            responses[code] = response
        return responses

    def _get_serializer_field_meta(self, field, direction):
        """A read-only field with `default=None` (`created_by.username` once the user is gone,
        a dataset's `latest_version` before its first) renders null: the schema says so."""
        meta = super()._get_serializer_field_meta(field, direction)
        if getattr(field, "read_only", False) and getattr(field, "default", empty) is None:
            meta["nullable"] = True
        return meta

    def _get_filter_parameters(self):
        """An action on one object (`/models/{id}/aliases/`, `/deployments/{id}/events/`)
        lists that object's rows and applies none of the list's filters: it documents none
        (drf-spectacular would copy the list's `?tenant=`, `?project=`, `?state=`)."""
        if getattr(self.view, "detail", False):
            return []
        return super()._get_filter_parameters()

    def _get_pagination_parameters(self):
        """Only a GET pages: a create on a list route (`POST /deployments/{id}/keys/`) takes
        no ?page_size=."""
        if self.method != "GET":
            return []
        return super()._get_pagination_parameters()

    def _get_parameters(self):
        """An optional query parameter sent empty (`?project=`) is the same as one left out:
        django-filter, the paginator and the views' own parameters all read it so; the
        schema says it (`allowEmptyValue`), or `?project=` would read as an invalid UUID."""
        return [
            {**parameter, "allowEmptyValue": True}
            if parameter.get("in") == "query" and not parameter.get("required")
            else parameter
            for parameter in super()._get_parameters()
        ]

    def _requires_auth(self) -> bool:
        return not any(isinstance(p, AllowAny) for p in self.view.get_permissions())
