"""Settings from the environment are typed and fail fast with the variable's name."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from config import env as env_module
from config.env import env_bool, env_database, env_int, env_list, env_str, use_services_env


def test_values_are_parsed(monkeypatch):
    monkeypatch.setenv("T_INT", "42")
    monkeypatch.setenv("T_BOOL", "yes")
    monkeypatch.setenv("T_LIST", "a, b,,c")
    monkeypatch.setenv("T_DB", "postgres://u:p%40ss@db.internal:6543/torus")
    assert env_int("T_INT", 1) == 42
    assert env_bool("T_BOOL", False) is True
    assert env_list("T_LIST", []) == ["a", "b", "c"]
    db = env_database("T_DB", "")
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "u",
        "p@ss",
        "db.internal",
        "6543",
        "torus",
    )


@pytest.mark.parametrize(
    ("reader", "value"),
    [
        (lambda: env_int("T_X", 1), "many"),
        (lambda: env_int("T_X", 1, minimum=5), "3"),
        (lambda: env_bool("T_X", False), "maybe"),
        (lambda: env_database("T_X", ""), "mysql://x/y"),
    ],
)
def test_bad_values_fail_naming_the_variable(monkeypatch, reader, value):
    monkeypatch.setenv("T_X", value)
    with pytest.raises(ImproperlyConfigured, match="T_X"):
        reader()


def test_required_value_missing_fails(monkeypatch):
    monkeypatch.delenv("T_MISSING", raising=False)
    with pytest.raises(ImproperlyConfigured, match="T_MISSING is required"):
        env_str("T_MISSING")


@pytest.fixture
def services_env(tmp_path, monkeypatch):
    """A services.env of our own; the settings' one is put back afterwards."""
    monkeypatch.setattr(env_module, "_services_env", dict(env_module._services_env))
    for name in ("TORUS_DATABASE_URL", "TORUS_REDIS_URL", "T_FILE"):
        monkeypatch.delenv(name, raising=False)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    use_services_env(secrets / "services.env")
    return secrets / "services.env"


def test_services_env_fills_what_the_environment_does_not_set(services_env, monkeypatch):
    services_env.write_text(
        "# comment\n\nTORUS_REDIS_URL=redis://:pw@127.0.0.1:16379\nT_FILE = 7\n"
        "TORUS_DATABASE_URL=postgres://torus:s3cret@127.0.0.1:15432/torus\n"
    )
    monkeypatch.setenv("TORUS_REDIS_URL", "redis://from-env:1")
    assert env_str("TORUS_REDIS_URL") == "redis://from-env:1"
    assert env_int("T_FILE", 1) == 7
    assert env_database("TORUS_DATABASE_URL", "postgres://x@y/z")["PASSWORD"] == "s3cret"


def test_missing_services_env_falls_back_only_while_the_service_has_no_password(services_env):
    default = "postgres://torus:torus@127.0.0.1:15432/torus"
    assert env_str("TORUS_DATABASE_URL", default) == default
    (services_env.parent / "postgres-password").write_text("x\n")
    use_services_env(services_env)
    with pytest.raises(
        ImproperlyConfigured, match=r"TORUS_DATABASE_URL is not set and .*services\.env"
    ):
        env_str("TORUS_DATABASE_URL", default)
    # Redis has no password file yet: its default still applies.
    assert env_str("TORUS_REDIS_URL", "redis://127.0.0.1:16379") == "redis://127.0.0.1:16379"


def test_a_named_services_env_must_exist(services_env):
    use_services_env(services_env, explicit=True)
    with pytest.raises(
        ImproperlyConfigured, match=r"services\.env cannot be read \(it does not exist\)"
    ):
        env_str("TORUS_REDIS_URL", "redis://127.0.0.1:16379")


def test_a_malformed_services_env_line_fails_with_its_place(services_env):
    services_env.write_text("TORUS_REDIS_URL=redis://x\nnot a setting\n")
    with pytest.raises(ImproperlyConfigured, match=r"services\.env:2: expected KEY=value"):
        env_str("TORUS_REDIS_URL")
