"""OpenAPI generation: every operation documents the shared error envelope for its error codes."""

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers
from rest_framework.permissions import AllowAny


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


class TorusAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        codes = ERROR_DESCRIPTIONS if self._requires_auth() else PUBLIC_ERRORS
        for code in codes:
            if code in responses:
                continue
            response = self._get_response_for_code(ErrorSerializer, code, direction=direction)
            response["description"] = ERROR_DESCRIPTIONS[code]
            responses[code] = response
        return responses

    def _requires_auth(self) -> bool:
        return not any(isinstance(p, AllowAny) for p in self.view.get_permissions())
