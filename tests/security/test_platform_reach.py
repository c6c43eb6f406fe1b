"""The platform out of reach of jobs: from a uid in the job range (TORUS_UID_RANGE) the
services' ports are refused by the firewall and the platform's files cannot be read, while the
platform itself (root, group torus) still gets through. The services refuse wrong passwords.

A job's uid needs no passwd entry: `setpriv` switches to 250000/350000 with no groups.
"""

import grp
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest
import redis
from django.conf import settings

JOB = ["setpriv", "--reuid=250000", "--regid=350000", "--clear-groups", "--"]
SERVICES = Path(settings.BASE_DIR) / "platform" / "services"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")

# What a job tries, run by the system Python (a job cannot run the platform's venv): each
# probe prints its errno name, or "ok".
PROBE = r"""
import errno, json, socket, sys
out = {}
for kind, target in json.loads(sys.argv[1]):
    try:
        if kind == "tcp":
            socket.create_connection(("127.0.0.1", int(target)), timeout=5).close()
        elif kind == "unix":
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(target)
            s.close()
        else:
            open(target, "rb").close()
        out[target] = "ok"
    except OSError as exc:
        out[target] = errno.errorcode.get(exc.errno, str(exc))
print(json.dumps(out))
"""


def probe(prefix: list[str], *targets: tuple[str, str]) -> dict:
    done = subprocess.run(
        [*prefix, SYSTEM_PYTHON, "-c", PROBE, json.dumps(targets)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        check=True,
    )
    return json.loads(done.stdout)


def service_ports() -> dict[str, int]:
    """The ports the firewall closes, from the variables the components read."""
    es = int(os.environ.get("TORUS_ES_PORT", "19200"))
    return {
        "postgres": int(settings.DATABASES["default"]["PORT"]),
        "redis": redis.connection.parse_url(settings.REDIS_URL)["port"],
        "elasticsearch": es,
        "elasticsearch-transport": int(os.environ.get("TORUS_ES_TRANSPORT_PORT", es + 100)),
        "slurmrestd": int(os.environ.get("TORUS_SLURMRESTD_PORT", "16820")),
        "slurmdbd": int(os.environ.get("TORUS_SLURMDBD_PORT", "16819")),
        "slurm-mariadb": int(os.environ.get("TORUS_SLURM_MARIADB_PORT", "16830")),
        "ldap": int(os.environ.get("TORUS_LDAP_PORT", "13389")),
    }


@pytest.mark.parametrize("service", sorted(service_ports()))
def test_a_job_uid_is_refused_at_every_service_port_the_platform_gets_through(service):
    port = str(service_ports()[service])
    assert probe([], ("tcp", port)) == {port: "ok"}, f"{service} does not answer the platform"
    assert probe(JOB, ("tcp", port)) == {port: "ECONNREFUSED"}


def test_a_job_uid_still_reaches_slurmctld_for_srun():
    port = os.environ.get("TORUS_SLURMCTLD_PORT", "16817")
    assert probe(JOB, ("tcp", port)) == {port: "ok"}


def test_a_job_uid_cannot_read_the_platforms_files_or_use_the_postgres_socket():
    var = Path(settings.VAR_DIR)
    pg_port = settings.DATABASES["default"]["PORT"]
    files = [
        var / "secret-key",
        var / "secrets" / "services.env",
        var / "secrets" / "postgres-password",
        var / "secrets" / "s3-secret-key",
        var / "s3" / "bin" / "settings",
        var / "postgres" / "data" / "PG_VERSION",
        var / "redis" / "redis.conf",
        var / "log" / "postgres.log",
    ]
    sock = var / "run" / "postgres" / f".s.PGSQL.{pg_port}"
    targets = [("file", str(f)) for f in files] + [("unix", str(sock))]
    assert set(probe([], *targets).values()) == {"ok"}  # each exists and root gets through
    assert probe(JOB, *targets) == {target: "EACCES" for _, target in targets}


def _mode(path: Path) -> tuple[str, str, str]:
    info = path.stat()
    return oct(stat.S_IMODE(info.st_mode)), grp.getgrgid(info.st_gid).gr_name, info.st_uid


def test_var_entries_have_the_documented_modes():
    """Closed by their own modes, not only by a checkout others cannot enter (CI's /root)."""
    var = Path(settings.VAR_DIR)
    torus_gid = grp.getgrnam("torus").gr_gid
    assert _mode(var)[0] == "0o711"
    assert _mode(var / "secrets")[:2] == ("0o750", "torus")
    for name in ("services.env", "postgres-password", "redis-password"):
        assert _mode(var / "secrets" / name)[:2] == ("0o640", "torus"), name
    assert _mode(var / "secret-key")[:2] == ("0o640", "torus")
    assert _mode(var / "log")[:2] == ("0o750", "torus")
    assert var.joinpath("log").stat().st_gid == torus_gid
    for name in ("postgres", "redis", "elasticsearch"):
        assert _mode(var / name)[0] == "0o700", name


@pytest.fixture
def open_dir():
    """A scratch directory the job uid can walk into (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="torus-reach-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_up_closes_an_existing_var_dir(open_dir):
    """torus_secure_var (run by `up` before any component) on files made world-readable."""
    var = open_dir / "var"
    (var / "log").mkdir(parents=True)
    for name in ("demo.json", "secret-key", "log/web.log"):
        (var / name).write_text("x")
        (var / name).chmod(0o644)
    var.chmod(0o755)
    subprocess.run(
        ["bash", "-c", f'source "{SERVICES}/lib.sh" && torus_secure_var'],
        env={**os.environ, "TORUS_VAR_DIR": str(var)},
        check=True,
        timeout=60,
    )
    assert _mode(var)[0] == "0o711"
    assert _mode(var / "demo.json")[0] == "0o600"
    assert _mode(var / "secret-key")[:2] == ("0o640", "torus")
    assert _mode(var / "log" / "web.log")[0] == "0o640"
    assert _mode(var / "secrets")[:2] == ("0o750", "torus")
    targets = [("file", str(var / n)) for n in ("demo.json", "secret-key", "log/web.log")]
    assert probe(JOB, *targets) == {target: "EACCES" for _, target in targets}


def test_postgres_refuses_a_wrong_or_missing_password():
    db = settings.DATABASES["default"]
    conninfo = {"host": db["HOST"], "port": db["PORT"], "dbname": db["NAME"], "user": db["USER"]}
    psycopg.connect(**conninfo, password=db["PASSWORD"], connect_timeout=5).close()
    for password in ("torus", "", db["PASSWORD"] + "x"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(**conninfo, password=password, connect_timeout=5)


def test_redis_refuses_a_wrong_or_missing_password():
    assert redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5).ping()
    port = redis.connection.parse_url(settings.REDIS_URL)["port"]
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, socket_timeout=5).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, password="torus", socket_timeout=5).ping()
