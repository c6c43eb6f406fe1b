"""Typed, fail-fast readers for settings that come from the environment.

Every reader raises ImproperlyConfigured naming the variable when a value is present but
malformed, so a bad deployment fails at start-up instead of at the first request.
A variable missing from the environment is looked up in the services file (use_services_env)
before its default applies.
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

# Settings that carry a service's password, and the file beside services.env that holds
# it: once that file exists, the setting never falls back to its passwordless default.
SERVICE_VARIABLES = {
    "TORUS_DATABASE_URL": "postgres-password",
    "TORUS_REDIS_URL": "redis-password",
}

_services_env: dict = {"path": None, "explicit": False, "values": None, "error": None}


def use_services_env(path: str | Path, *, explicit: bool = False) -> None:
    """Take variables missing from the environment from PATH (KEY=value lines), the file
    platform/services writes (secrets/services.env). EXPLICIT: the path was named
    (TORUS_SERVICES_ENV), so a missing file is an error rather than "no passwords yet"."""
    _services_env.update(path=Path(path), explicit=explicit, values=None, error=None)


def _file_values() -> dict[str, str]:
    state = _services_env
    if state["path"] is None:
        return {}
    if state["values"] is None:
        path: Path = state["path"]
        try:
            text = path.read_text()
        except FileNotFoundError:
            state["values"], state["error"] = {}, "it does not exist"
            return state["values"]
        except OSError as exc:
            state["values"], state["error"] = {}, exc.strerror or str(exc)
            return state["values"]
        values = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise ImproperlyConfigured(f"{path}:{number}: expected KEY=value")
            values[key.strip()] = value.strip()
        state["values"] = values
    return state["values"]


def _get(name: str) -> str | None:
    if name in os.environ:
        return os.environ[name]
    values = _file_values()
    if name in values:
        return values[name]
    error, path = _services_env["error"], _services_env["path"]
    if name in SERVICE_VARIABLES and error:
        # A missing file is fine while the service has no password (nothing generated yet).
        if (
            error == "it does not exist"
            and not _services_env["explicit"]
            and not (path.parent / SERVICE_VARIABLES[name]).exists()
        ):
            return None
        raise ImproperlyConfigured(
            f"{name} is not set and {path} cannot be read ({error}); "
            "platform/services/up writes it, readable by root and group torus"
        )
    return None


def env_str(name: str, default: str | None = None) -> str:
    value = _get(name)
    if value is None:
        value = default
    if value is None:
        raise ImproperlyConfigured(f"environment variable {name} is required")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = _get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = _get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = _get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_range(name: str, default: tuple[int, int]) -> tuple[int, int]:
    """'LOW-HIGH' (inclusive) -> (low, high)."""
    raw = env_str(name, f"{default[0]}-{default[1]}")
    low, _, high = raw.partition("-")
    if not (low.strip().isdigit() and high.strip().isdigit()) or int(low) > int(high):
        raise ImproperlyConfigured(f"{name} must look like 200000-299999, not {raw!r}")
    return int(low), int(high)


def env_database(name: str, default: str) -> dict:
    """Parse a postgres://user:password@host:port/name URL into a Django DATABASES entry."""
    raw = env_str(name, default)
    url = urlparse(raw)
    if url.scheme not in {"postgres", "postgresql"} or not url.path.strip("/"):
        raise ImproperlyConfigured(f"{name} must look like postgres://user:pass@host:port/db")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(url.path.lstrip("/")),
        "USER": unquote(url.username or ""),
        "PASSWORD": unquote(url.password or ""),
        "HOST": url.hostname or "",
        "PORT": str(url.port or 5432),
        # A connection pool (psycopg 3): under ASGI, Django's persistent connections do not
        # outlive a request, and opening one per request costs more than the request itself.
        "CONN_MAX_AGE": 0,
        # Parameters bound by the server, so that psycopg prepares a statement the second
        # time a pooled connection runs it: planning a join of three tables costs PostgreSQL
        # about as much as running it, and the API's reads are the same few statements.
        "OPTIONS": {
            "pool": {"min_size": 2, "max_size": 20, "timeout": 30},
            "server_side_binding": True,
            "prepare_threshold": 2,
        },
        # Several checkouts (or developers) on one server keep their test databases apart.
        "TEST": {
            "NAME": env_str("TORUS_TEST_DATABASE_NAME", f"test_{unquote(url.path.lstrip('/'))}")
        },
    }
