"""Serializer bases: unknown fields in a request body are an error, never silently ignored.
Fields with bounds the schema shows: dictionaries with at most so many entries, JSON numbers
within the range PostgreSQL gives back unchanged, JSON values of bounded size and depth."""

import json

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils import html

from apps.core import jsonsafe
from apps.core.jsonsafe import renderable


class StrictFieldsMixin:
    def to_internal_value(self, data):
        if isinstance(data, dict):
            writable = {name for name, f in self.fields.items() if not f.read_only}
            unknown = sorted(set(data) - writable)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class StrictSerializer(StrictFieldsMixin, serializers.Serializer):
    pass


class StrictModelSerializer(StrictFieldsMixin, serializers.ModelSerializer):
    pass


class RenderableJSONField(serializers.JSONField):
    """A stored JSON value as the API can always write it: a row from before the bounds (an
    integer beyond 64 bits, a NaN) renders with that value as text or null, never a 500."""

    def to_representation(self, value):
        return renderable(super().to_representation(value))


class BoundedDictField(serializers.DictField):
    """A DictField of at most `max_items` entries, keys of at most `max_key_length`."""

    def __init__(self, *, max_items: int, max_key_length: int = 128, **kwargs):
        self.max_items, self.max_key_length = max_items, max_key_length
        super().__init__(**kwargs)

    def get_value(self, dictionary):
        """In a form (multipart) body, the field as one part holding JSON is read as that
        JSON (DRF's DictField reads only `name.key` parts, and would drop it)."""
        if html.is_html_input(dictionary) and self.field_name in dictionary:
            text = dictionary.get(self.field_name)
            try:
                return json.loads(text) if isinstance(text, str | bytes) else text
            except ValueError:
                return text  # not JSON: refused as "not a dictionary"
        return super().get_value(dictionary)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            if len(data) > self.max_items:
                raise serializers.ValidationError(f"At most {self.max_items} entries.")
            if any(len(str(key)) > self.max_key_length for key in data):
                raise serializers.ValidationError(
                    f"Keys are at most {self.max_key_length} characters."
                )
        return super().to_internal_value(data)


class BoundedDictFieldSchema(OpenApiSerializerFieldExtension):
    target_class = BoundedDictField
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        return {**schema, "maxProperties": self.target.max_items}


NUMBER_SCHEMA = {"type": "number", "minimum": -jsonsafe.MAX_NUMBER, "maximum": jsonsafe.MAX_NUMBER}


@extend_schema_field(NUMBER_SCHEMA)
class JSONNumberField(serializers.Field):
    """A JSON number (an integer stays one) that is finite and within ±1e15."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise serializers.ValidationError("Expected a number.")
        problem = jsonsafe.problem(data)
        if problem:
            raise serializers.ValidationError(problem)
        return data

    def to_representation(self, value):
        return value


@extend_schema_field(
    {"oneOf": [{"type": "string", "maxLength": 4096}, NUMBER_SCHEMA, {"type": "boolean"}]}
)
class JSONScalarField(serializers.Field):
    """A string of at most 4096 characters, a number as JSONNumberField takes, or a boolean."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            if len(data) > 4096:
                raise serializers.ValidationError("At most 4096 characters.")
            return data
        if isinstance(data, bool):
            return data
        return JSONNumberField().to_internal_value(data)

    def to_representation(self, value):
        return value
