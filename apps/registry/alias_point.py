"""An alias pointed at a version, with its audit row, in one statement.

Moving `production` is the registry's most frequent write. Done with the ORM it is five round
trips (BEGIN, the alias locked, its update, the audit row, COMMIT); here it is one: the alias
row is locked by the statement (a concurrent move waits, then reads ours as its `before`),
updated only if it points elsewhere, made if it does not exist yet, and the audit row
written only for a change, all or nothing.
"""

from django.db import connection

from apps.core.statements import insert_parts
from apps.registry.models import ModelAlias, ModelVersion
from apps.tenancy.models import AuditEvent

# {alias}, {version}, {audit}: table names; {audit_columns}, {audit_values}: from the model's
# fields (apps/core/statements.py). Every value is a parameter. The lock is taken on the
# alias row alone: a join in the locking query would be re-checked against the version row
# it first read, and drop the alias that a concurrent move has just pointed elsewhere. No
# row comes back when the alias was made concurrently, or points at a version newer than
# this statement's snapshot: the caller runs it again.
STATEMENT = """
WITH old AS (
    SELECT id, version_id, updated_at FROM {alias}
    WHERE model_id = %(model)s AND name = %(name)s
    FOR UPDATE
), was AS (
    SELECT old.*, v.number AS before FROM old JOIN {version} v ON v.id = old.version_id
), moved AS (
    UPDATE {alias} a SET version_id = %(version)s, updated_at = clock_timestamp()
    FROM was WHERE a.id = was.id AND was.version_id <> %(version)s
    RETURNING a.id, a.updated_at, was.before
), made AS (
    INSERT INTO {alias} (id, created_at, updated_at, model_id, name, version_id)
    SELECT %(new_id)s, clock_timestamp(), clock_timestamp(), %(model)s, %(name)s, %(version)s
    WHERE NOT EXISTS (SELECT 1 FROM old)
    ON CONFLICT (model_id, name) DO NOTHING
    RETURNING id, updated_at, NULL::integer AS before
), changed AS (
    SELECT * FROM moved UNION ALL SELECT * FROM made
), audited AS (
    INSERT INTO {audit} ({audit_columns}) SELECT {audit_values} FROM changed
)
SELECT id, updated_at, before, true FROM changed
UNION ALL SELECT id, updated_at, before, false FROM was WHERE version_id = %(version)s
"""
# the audit row's changes: {"alias": name, "version": [before, after]}, `before` from the row
CHANGES = (
    "jsonb_set(%(audit_changes)s::jsonb, '{version,0}', "
    "coalesce(to_jsonb(changed.before), 'null'::jsonb))"
)
# the time of the move is when the statement holds the lock (not when it was sent): the audit
# log's order is the order the moves took effect
AT_THE_MOVE = {"created_at": "clock_timestamp()", "updated_at": "clock_timestamp()"}


def point(
    *, model_id, name: str, version: ModelVersion, audit: AuditEvent
) -> tuple[ModelAlias, int | None, bool] | None:
    """Point alias `name` of the model at `version`: (the alias, the version number it
    pointed at before or None, whether it changed). `audit`: the unsaved event of the move,
    whose `changes` are {"alias": name, "version": [<any>, version.number]}. None when a
    concurrent call made the alias, or pointed it at a version made, just now: call again,
    ours then comes after it."""
    quote = connection.ops.quote_name
    columns, values, params = insert_parts(
        audit, prefix="audit_", expressions={"changes": CHANGES, **AT_THE_MOVE}
    )
    params["audit_changes"] = AuditEvent._meta.get_field("changes").get_db_prep_save(
        audit.changes, connection
    )
    fresh = ModelAlias(model_id=model_id, name=name, version=version)
    sql = STATEMENT.format(
        alias=quote(ModelAlias._meta.db_table),
        version=quote(ModelVersion._meta.db_table),
        audit=quote(AuditEvent._meta.db_table),
        audit_columns=columns,
        audit_values=values,
    )
    params |= {
        "model": model_id,
        "name": name,
        "version": version.pk,
        "new_id": fresh.pk,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    pk, updated_at, before, changed = row
    alias = ModelAlias(id=pk, model_id=model_id, name=name, version=version, updated_at=updated_at)
    return alias, before, changed
