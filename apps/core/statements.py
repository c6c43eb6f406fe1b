"""Parts of hand-written statements taken from a model's own fields, for the few writes that
are worth one round trip to PostgreSQL instead of several (apps/registry/alias_point.py, a
job's submit in apps/jobs/services.py)."""

import json
from functools import cache

import orjson
from django.db import connection
from django.db.models import JSONField, Model


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


@cache
def _insert_from_json(model: type[Model]) -> str:
    """INSERT of a model's rows from one JSON array parameter (one object a row, a key per
    column): PostgreSQL converts each value to its column's type."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(field.column) for field in model._meta.concrete_fields)
    return (
        f"INSERT INTO {table} ({columns}) SELECT {columns} "  # noqa: S608 (names, quoted)
        f"FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb)"
    )


@cache
def _statement(models: tuple[type[Model], ...]) -> str:
    *before, last = [_insert_from_json(model) for model in models]
    ctes = ", ".join(f"i{i} AS ({part})" for i, part in enumerate(before))
    return f"WITH {ctes} {last}" if ctes else last


def _row(obj: Model) -> dict:
    """One row as JSON values: a JSON field's value as it is (its encoder applied), every
    other field's as Django prepares it for saving (auto_now times set)."""
    row = {}
    for field in obj._meta.concrete_fields:
        value = field.pre_save(obj, add=True)
        if isinstance(field, JSONField):
            if field.encoder is not None and value is not None:
                value = json.loads(json.dumps(value, cls=field.encoder))
        else:
            value = field.get_prep_value(value)
        row[field.column] = value
    return row


def insert_together(*groups: tuple[type[Model], list[Model]]) -> None:
    """Insert the unsaved objects of several models in one statement: all rows or none, one
    round trip, with no transaction needed around it. Foreign keys between the groups are
    checked when the statement ends (Django makes them deferrable), so their order does not
    matter. The statement's text depends only on the models, not on how many rows each has
    (an empty group inserts nothing), so PostgreSQL prepares it once a connection."""
    sql = _statement(tuple(model for model, _ in groups))
    params = [orjson.dumps([_row(obj) for obj in objs], default=str).decode() for _, objs in groups]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    for _, objs in groups:
        for obj in objs:
            obj._state.adding, obj._state.db = False, connection.alias
