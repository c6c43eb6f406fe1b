"""The API's JSON renderer: DRF's output, written by orjson.

orjson writes what DRF's JSONRenderer writes (compact, UTF-8, U+2028 and U+2029 escaped)
several times faster. Dates and times, Decimals, lazy strings and the other types DRF's
encoder knows go through that encoder, so they read as before ("Z" for UTC;
tests/core/test_renderer.py compares the bytes). Where the two differ: a NaN or an infinity
is written as null (DRF's strict renderer fails the response; the services refuse them on
input). A client asking for an indent (`Accept: application/json; indent=4`) gets DRF's.
Rows that PostgreSQL wrote as JSON (`orjson.Fragment`) are copied in as they are."""

import orjson
from rest_framework.renderers import JSONRenderer as DRFJSONRenderer
from rest_framework.utils.encoders import JSONEncoder

_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS
_default = JSONEncoder().default


class JSONRenderer(DRFJSONRenderer):
    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        if self.get_indent(accepted_media_type, renderer_context or {}) is not None:
            # rows PostgreSQL wrote (orjson.Fragment, apps/core/api/json_rows.py) as values
            data = orjson.loads(orjson.dumps(data, default=_default, option=_OPTIONS))
            return super().render(data, accepted_media_type, renderer_context)
        out = orjson.dumps(data, default=_default, option=_OPTIONS)
        return out.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
