"""What the registry accepts: names, tags, metrics, parameters, aliases and file paths (the
domain checks what it is given, whoever calls)."""

import re

from django.core.exceptions import ValidationError

from apps.datasets.storage.base import key_problem
from apps.registry.models import ALIAS_RE, NAME_RE, TAG_KEY_RE

MAX_METRICS = 1000
MAX_PARAMS = 1000
MAX_CARD = 256 * 1024
MAX_FILES = 10_000
METRIC_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,99}$")


# -- validation (the domain checks what it is given, whoever calls) -----------------------------


def valid_name(value: str, *, field: str = "name") -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValidationError(
            {field: ["1-100 letters, digits, '.', '_' or '-', starting with a letter or digit."]}
        )
    return value


def valid_tags(value, *, field: str = "tags") -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > 50:
        raise ValidationError({field: ["An object of at most 50 tags."]})
    for key, item in value.items():
        if not TAG_KEY_RE.match(key) or not isinstance(item, str) or len(item) > 256:
            raise ValidationError(
                {field: [f"Tag {key[:64]!r}: keys of letters, digits, '._/-'; string values."]}
            )
    return dict(value)


def valid_metrics(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_METRICS:
        raise ValidationError({"metrics": [f"An object of at most {MAX_METRICS} numbers."]})
    for key, item in value.items():
        if not METRIC_NAME_RE.match(key):
            raise ValidationError({"metrics": [f"{key[:64]!r} is not a valid metric name."]})
        if isinstance(item, bool) or not isinstance(item, int | float) or item != item:
            raise ValidationError({"metrics": [f"{key}: must be a finite number."]})
        if item in (float("inf"), float("-inf")):
            raise ValidationError({"metrics": [f"{key}: must be a finite number."]})
    return dict(value)


def valid_params(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_PARAMS:
        raise ValidationError({"params": [f"An object of at most {MAX_PARAMS} parameters."]})
    out = {}
    for key, item in value.items():
        if not METRIC_NAME_RE.match(key):
            raise ValidationError({"params": [f"{key[:64]!r} is not a valid parameter name."]})
        if isinstance(item, dict | list) or item is None:
            raise ValidationError({"params": [f"{key}: give a string, number or boolean."]})
        text = item if isinstance(item, str) else str(item)
        if len(text) > 4096 or "\x00" in text:
            raise ValidationError({"params": [f"{key}: at most 4096 characters, no NUL."]})
        out[key] = text
    return out


def file_path_problem(path: str) -> str | None:
    """A file's path inside a version: relative, no '.'/'..'/empty parts, no control chars."""
    if not isinstance(path, str):
        return "Must be a string."
    if len(path) > 1000:
        return "At most 1000 characters."
    return key_problem(path)


def valid_alias(value: str) -> str:
    if not isinstance(value, str) or not ALIAS_RE.match(value) or value == "latest":
        raise ValidationError(
            {
                "alias": [
                    "1-40 lowercase letters, digits, '_' or '-', starting with a letter;"
                    " 'latest' is reserved."
                ]
            }
        )
    return value
