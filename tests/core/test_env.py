"""Settings from the environment are typed and fail fast with the variable's name."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_database, env_int, env_list, env_str


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
