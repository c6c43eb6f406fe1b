"""Parts of hand-written statements taken from a model's own fields, for the few writes that
are worth one round trip to PostgreSQL instead of several (apps/registry/alias_point.py)."""

from django.db import connection
from django.db.models import Model


def insert_parts(obj: Model, *, prefix: str, expressions: dict[str, str] | None = None):
    """(columns, values, params) of an INSERT of the unsaved `obj`: its table's columns, quoted;
    a named placeholder `%(<prefix><column>)s` per value, or the SQL expression that
    `expressions` gives for a field (by name, written by the caller: never input); the
    values, converted as Django would save them."""
    expressions = expressions or {}
    quote = connection.ops.quote_name
    columns, values, params = [], [], {}
    for field in obj._meta.concrete_fields:
        columns.append(quote(field.column))
        if field.name in expressions:
            values.append(expressions[field.name])
            continue
        key = f"{prefix}{field.column}"
        values.append(f"%({key})s")
        params[key] = field.get_db_prep_save(field.pre_save(obj, add=True), connection)
    return ", ".join(columns), ", ".join(values), params
