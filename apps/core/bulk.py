"""Many rows updated in one statement, without Django's bulk_update cost.

`QuerySet.bulk_update` writes one `CASE WHEN pk = ... THEN ...` per row and field, and
compiling it copies an expression tree per row: a third of the dispatcher's CPU when it
recorded 100 submitted attempts (bench/README.md, kubernetes_submit). Here the rows travel as
one JSON parameter, typed by the columns' own types: `UPDATE ... FROM jsonb_to_recordset`.
"""

import datetime
import decimal
import json
import uuid

from django.db import connection
from django.db.models import JSONField, Model


def _json_value(value):
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value)
    return value


def bulk_update(objs: list[Model], fields: list[str]) -> int:
    """Write these fields of these instances (all of one model); the number of rows updated."""
    if not objs:
        return 0
    meta = type(objs[0])._meta
    pk = meta.pk
    columns = [meta.get_field(name) for name in fields]
    quote = connection.ops.quote_name
    rows = []
    for obj in objs:
        row = {pk.column: _json_value(pk.get_db_prep_value(obj.pk, connection))}
        for field in columns:
            value = getattr(obj, field.attname)
            if not isinstance(field, JSONField):  # a JSON value goes in as it is
                value = _json_value(field.get_db_prep_save(value, connection))
            row[field.column] = value
        rows.append(row)
    types = ", ".join(
        f"{quote(field.column)} {field.db_type(connection)}" for field in [pk, *columns]
    )
    assignments = ", ".join(f"{quote(f.column)} = r.{quote(f.column)}" for f in columns)
    # only the model's own table and column names, quoted, are put into the text; every
    # value is in the one parameter
    sql = (
        f"UPDATE {quote(meta.db_table)} AS t SET {assignments} "  # noqa: S608
        f"FROM jsonb_to_recordset(%s::jsonb) AS r({types}) "
        f"WHERE t.{quote(pk.column)} = r.{quote(pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [json.dumps(rows)])
        return cursor.rowcount
