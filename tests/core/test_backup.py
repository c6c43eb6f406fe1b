"""The restore drill: scripts/pg-backup against the real PostgreSQL (docs/backup.md).

Scratch databases only (torus_backup_drill_<random>_*), owned by the platform role and dropped
at the end; neither the platform's database nor Django's test database is touched.
"""

import os
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings
from psycopg import sql

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pg-backup"
ROWS = 3000

SCHEMA = """
CREATE TABLE item (
    id bigserial PRIMARY KEY,
    name text NOT NULL,
    payload jsonb,
    blob bytea,
    at timestamptz NOT NULL DEFAULT now(),
    note text
);
CREATE INDEX item_name ON item (name);
CREATE SEQUENCE ticket START 1000;
"""
INSERT = """
INSERT INTO item (name, payload, blob, note)
SELECT 'item ' || g || ' ünïcødé ✓', jsonb_build_object('g', g, 'sq', g * g),
       decode(md5(g::text), 'hex'), CASE WHEN g %% 7 = 0 THEN NULL ELSE repeat('x', g %% 50) END
FROM generate_series(%s::int, %s::int) AS g
"""
CHECKSUM = "SELECT count(*), max(id), md5(string_agg(t::text, E'\\n' ORDER BY id)) FROM item t"


def connect(dbname: str) -> psycopg.Connection:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        dbname=dbname,
        user=db["USER"],
        password=db["PASSWORD"],
        host=db["HOST"],
        port=db["PORT"],
        autocommit=True,
    )


def query(dbname: str, statement: str, params=None) -> tuple:
    with connect(dbname) as conn:
        return conn.execute(statement, params).fetchone()


def pg_backup(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    """A source database with committed rows and a backup of it, then more rows written after
    the backup (and one whose transaction was still open while the backup ran)."""
    prefix = f"torus_backup_drill_{uuid.uuid4().hex[:10]}"
    names = {"source": f"{prefix}_src", "copy": f"{prefix}_copy", "bad": f"{prefix}_bad"}
    try:
        with connect("postgres") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(names["source"])))
        with connect(names["source"]) as conn:
            conn.execute(SCHEMA)
            conn.execute(INSERT, (1, ROWS))
            conn.execute("SELECT nextval('ticket') FROM generate_series(1, 42)")
        # The last row committed just before the backup; another left open across it.
        last_id = query(names["source"], "INSERT INTO item (name) VALUES ('last') RETURNING id")[0]
        before = query(names["source"], CHECKSUM)
        open_tx = connect(names["source"])
        open_tx.autocommit = False
        open_tx.execute("INSERT INTO item (name) VALUES ('open during the backup')")
        # Where the sequence stood at the backup (the open insert took a value too).
        seq_at_backup = query(names["source"], "SELECT last_value FROM item_id_seq")[0]
        assert seq_at_backup == last_id + 1

        dump = tmp_path_factory.mktemp("backup") / "drill.dump"
        result = pg_backup("backup", "--database", names["source"], str(dump))
        open_tx.commit()
        open_tx.close()
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(dump)

        with connect(names["source"]) as conn:
            conn.execute(INSERT, (ROWS + 1, ROWS + 500))  # after the backup
        assert query(names["source"], CHECKSUM)[0] == before[0] + 501
        yield {
            "names": names,
            "dump": dump,
            "before": before,
            "last_id": last_id,
            "seq_at_backup": seq_at_backup,
        }
    finally:
        for name in names.values():
            drop_database(name)


def drop_database(name: str) -> None:
    """DROP ... WITH (FORCE), again while an autovacuum worker is in the database: a freshly
    restored copy draws one, and only a superuser may end it (the platform's role is not)."""
    for attempt in range(40):
        try:
            with connect("postgres") as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
            return
        except psycopg.errors.InsufficientPrivilege:
            if attempt == 39:
                raise
            time.sleep(0.5)


def assert_restored(dbname: str, drill: dict) -> None:
    """Every row committed before the backup, identical; nothing written after it; the
    sequences carry on from where they stood at the backup."""
    assert query(dbname, CHECKSUM) == drill["before"]
    assert query(dbname, "SELECT count(*) FROM item WHERE id = %s", (drill["last_id"],)) == (1,)
    assert query(dbname, "SELECT count(*) FROM item WHERE name LIKE 'open%'") == (0,)
    assert query(dbname, "SELECT nextval('ticket')") == (1042,)
    new_id = query(dbname, "INSERT INTO item (name) VALUES ('new') RETURNING id")[0]
    assert new_id == drill["seq_at_backup"] + 1


def test_backup_file_is_private_and_complete(drill):
    dump = drill["dump"]
    assert dump.read_bytes()[:5] == b"PGDMP"
    assert dump.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in dump.parent.iterdir()] == [dump.name]  # no temporary left behind


def test_restore_into_a_new_database(drill):
    result = pg_backup("restore", "--database", drill["names"]["copy"], str(drill["dump"]))
    assert result.returncode == 0, result.stderr
    assert_restored(drill["names"]["copy"], drill)


def test_restore_over_the_source_with_clean(drill):
    result = pg_backup("restore", "--database", drill["names"]["source"], str(drill["dump"]))
    assert result.returncode == 0, result.stderr
    assert_restored(drill["names"]["source"], drill)


@pytest.mark.parametrize("kind", ["random", "missing", "truncated"])
def test_a_bad_file_leaves_the_database_untouched(drill, tmp_path, kind):
    target = drill["names"]["source"]
    bad = tmp_path / "bad.dump"
    if kind == "random":
        bad.write_bytes(os.urandom(64 * 1024))
    elif kind == "truncated":  # the table of contents is whole, the data is cut short
        data = drill["dump"].read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    before = query(target, CHECKSUM)
    result = pg_backup("restore", "--database", target, str(bad))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    if kind == "truncated":  # pg_restore's own error lines come first
        assert "nothing was changed" in lines[-1]
    else:
        assert len(lines) == 1 and str(bad) in lines[0], result.stderr
        assert "Traceback" not in result.stderr
    assert query(target, CHECKSUM) == before


def test_restore_refuses_a_database_in_use(drill):
    with connect(drill["names"]["source"]):
        result = pg_backup("restore", "--database", drill["names"]["source"], str(drill["dump"]))
    assert result.returncode == 1
    assert "scripts/portal stop" in result.stderr


def test_failed_backup_leaves_no_file(drill, tmp_path):
    result = pg_backup("backup", "--database", drill["names"]["bad"], str(tmp_path / "x.dump"))
    assert result.returncode == 1
    assert list(tmp_path.iterdir()) == []


def test_default_backup_location(drill, tmp_path):
    """Without FILE: <TORUS_VAR_DIR>/backups/<database>-<UTC time>.dump, directory 0700."""
    db = settings.DATABASES["default"]
    user, password = quote(db["USER"], safe=""), quote(db["PASSWORD"], safe="")
    url = f"postgres://{user}:{password}@{db['HOST']}:{db['PORT']}/unused"
    env = {**os.environ, "TORUS_VAR_DIR": str(tmp_path), "TORUS_DATABASE_URL": url}
    result = pg_backup("backup", "--database", drill["names"]["source"], env=env)
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path.parent == tmp_path / "backups"
    assert path.name.startswith(drill["names"]["source"] + "-") and path.suffix == ".dump"
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert path.stat().st_mode & 0o777 == 0o600
