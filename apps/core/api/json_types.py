"""A JSON body keeps JSON's own types: `0` is not the string "0", `false` is not a number.

DRF's fields coerce what they are given (a CharField turns 0 into "0", an IntegerField takes
"5" and false), which is right for query and form data, where every value is a string, and
wrong for a JSON body, whose schema names each value's type. So the JSON parser
(apps/core/api/parsers.py) marks every object it reads (JSONObject), and `install()` makes
every serializer check, for a marked object only, each writable field's value against the
JSON types the field stands for, before DRF's own conversion: a mismatch is a 400 at the
field ("Expected a string, got a number.")."""

from rest_framework import fields, serializers
from rest_framework.exceptions import ValidationError


class JSONObject(dict):
    """An object read from a JSON body."""


# The JSON types a field takes, most specific field class first (bool is an int in Python,
# so it is only ever a boolean's value).
_ACCEPTS = (
    (fields.BooleanField, (bool,)),
    (fields.IntegerField, (int,)),
    (fields.FloatField, (int, float)),
    (fields.DecimalField, (int, float, str)),
    (fields.CharField, (str,)),
    (fields.UUIDField, (str,)),
)


def _json_type(value) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _accepted(field: fields.Field) -> tuple | None:
    if isinstance(field, fields.ChoiceField):
        return tuple({type(value) for value in field.choice_strings_to_values.values()}) or None
    for cls, types in _ACCEPTS:
        if isinstance(field, cls):
            return types
    return None


def _wrong(types: tuple | None, value) -> str | None:
    if types is None or value is None:  # null is the field's own allow_null rule
        return None
    if isinstance(value, types) and (bool in types or not isinstance(value, bool)):
        return None
    wanted = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    expected = " or ".join(sorted({wanted.get(t, t.__name__) for t in types}))
    return f"Expected {expected}, got {_json_type(value)}."


def mismatch(*, field: fields.Field, value) -> str | None:
    """Why `value`, read from JSON, is not of a type `field` takes; None when it is."""
    if isinstance(field, fields.MultipleChoiceField):
        if not isinstance(value, list):
            return None  # DRF's own "not a list"
        return next(filter(None, (_wrong(_accepted(field), item) for item in value)), None)
    if isinstance(field, fields.ListField) and isinstance(value, list):
        items = value
    elif isinstance(field, fields.DictField) and isinstance(value, dict):
        items = value.values()
    else:
        return _wrong(_accepted(field), value)
    return next(filter(None, (mismatch(field=field.child, value=item) for item in items)), None)


def check(*, serializer: serializers.Serializer, data) -> None:
    """Raise a 400 naming each writable field whose JSON value has a type it does not take."""
    if not isinstance(data, JSONObject):
        return
    errors = {}
    for name, field in serializer.fields.items():
        if not field.read_only and name in data:
            reason = mismatch(field=field, value=data[name])
            if reason:
                errors[name] = [reason]
    if errors:
        raise ValidationError(errors)


def install() -> None:
    """Every serializer checks a JSON object's types before DRF converts its values."""
    convert = serializers.Serializer.to_internal_value
    if getattr(convert, "json_types_checked", False):
        return

    def to_internal_value(self, data):
        check(serializer=self, data=data)
        return convert(self, data)

    to_internal_value.json_types_checked = True
    serializers.Serializer.to_internal_value = to_internal_value
