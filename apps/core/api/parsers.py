"""Request parsers: JSON whose objects keep their types checked, and YAML, for job specs
written by people."""

import codecs
import json

import yaml
from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from apps.core.api.json_types import JSONObject


class JSONParser(parsers.JSONParser):
    """DRF's, with every object read as a JSONObject (apps/core/api/json_types.py)."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.load(
                codecs.getreader(encoding)(stream),
                object_pairs_hook=JSONObject,
                parse_constant=_refuse_constant,
            )
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return yaml.safe_load(stream.read().decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParseError(f"YAML parse error - {exc}") from exc
