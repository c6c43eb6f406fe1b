"""The API's JSON renderer (apps/core/api/renderers.py) writes what DRF's JSONRenderer writes,
with orjson: the same bytes for the types the API returns (datetimes with "Z" for UTC, U+2028
and U+2029 escaped); an indent asked for is DRF's."""

import uuid
from collections import OrderedDict
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.utils.translation import gettext_lazy
from rest_framework.renderers import JSONRenderer as DRFJSONRenderer
from rest_framework.utils.serializer_helpers import ReturnDict, ReturnList

from apps.core.api.renderers import JSONRenderer

DATA = {
    "id": uuid.UUID("8a3c0d2e-7d4f-4f5e-9a51-0c4a1c1e9b7d"),
    "created_at": datetime(2026, 12, 2, 19, 0, 1, 123456, tzinfo=UTC),
    "naive": datetime(2026, 12, 2, 19, 0, 1),
    "day": date(2026, 12, 2),
    "at": time(7, 8, 9, 500000),
    "after": timedelta(seconds=90),
    "cost": Decimal("12.50"),
    "label": gettext_lazy("Not found."),
    "line": "loss=0.25\u2028next\u2029é ✓",
    "counts": {1: "one", 2: "two"},
    "flags": [True, False, None],
    "numbers": [0, -3, 2**53, 0.1, 1.5],
    "rows": ReturnList([ReturnDict(OrderedDict(a=1), serializer=None)], serializer=None),
    "tags": ("x", "y"),
    "raw": b"bytes",
}


def test_the_same_bytes_as_drf():
    ours, theirs = JSONRenderer().render(DATA), DRFJSONRenderer().render(DATA)
    assert ours == theirs
    assert b'"created_at":"2026-12-02T19:00:01.123456Z"' in ours
    assert b"\\u2028next\\u2029" in ours


def test_an_indent_asked_for_and_nothing_to_render():
    media = "application/json; indent=2"
    assert JSONRenderer().render(DATA, media) == DRFJSONRenderer().render(DATA, media)
    assert JSONRenderer().render(None) == b""


def test_the_api_answers_through_it(client):
    response = client.get("/api/v1/auth/me")
    assert response.status_code in (401, 403)
    assert response.json()["error"]["code"]
