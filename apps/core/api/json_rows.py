"""Rows that PostgreSQL renders as the API's JSON, for long pages of plain fields.

A page of 50 model versions read as Python values spends more in converting them (timestamps
parsed, then written again; UUIDs made, then printed) than in the query. Here PostgreSQL
writes each row's JSON object, keys in the order given, and the renderer copies it in as it
is (`orjson.Fragment`, apps/core/api/renderers.py).

Written as DRF writes them: UUIDs as strings; times in UTC (settings.TIME_ZONE) as
`2026-12-04T10:04:33.123456Z`, without the fraction when it is zero.
"""

import re

from django.db.models import F, Func, TextField
from django.db.models.functions import Cast

KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

# to_char's pattern, then the fraction only when there is one, as datetime.isoformat() does
_UTC = "(%(expressions)s) AT TIME ZONE 'UTC'"
_ISO_UTC = (
    f"to_char({_UTC}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN "
    f"mod(extract(microseconds FROM %(expressions)s)::bigint, 1000000) = 0 THEN '' "
    f"ELSE to_char({_UTC}, '.US') END || 'Z'"
)


class JSONRow(Func):
    """json_build_object('key', value, ...) as text: one row's object, keys in order. The keys
    are the caller's constants, written into the statement as literals (checked here)."""

    output_field = TextField()

    def __init__(self, pairs: dict):
        for key in pairs:
            if not KEY_RE.match(key):
                raise ValueError(f"not a plain key: {key!r}")
        self.keys = list(pairs)
        super().__init__(*pairs.values())

    def as_sql(self, compiler, connection, **extra):
        parts, params = [], []
        for key, expression in zip(self.keys, self.get_source_expressions(), strict=True):
            sql, more = compiler.compile(expression)
            parts.append(f"'{key}', {sql}")
            params.extend(more)
        return f"json_build_object({', '.join(parts)})::text", params


def utc_time(field: str) -> Func:
    """A timestamp column as the API writes it (null stays null)."""
    return Func(F(field), template=_ISO_UTC, output_field=TextField())


def text(field: str) -> Cast:
    """A UUID column (or any) as its text (null stays null)."""
    return Cast(F(field), TextField())
