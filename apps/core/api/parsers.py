"""Request parsers beyond JSON: YAML, for job specs written by people."""

import yaml
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return yaml.safe_load(stream.read().decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParseError(f"YAML parse error - {exc}") from exc
