"""Typed, fail-fast readers for settings that come from the environment.

Every reader raises ImproperlyConfigured naming the variable when a value is present but
malformed, so a bad deployment fails at start-up instead of at the first request.
"""

import os
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise ImproperlyConfigured(f"environment variable {name} is required")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
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
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


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
        "OPTIONS": {"pool": {"min_size": 2, "max_size": 20, "timeout": 30}},
        # Several checkouts (or developers) on one server keep their test databases apart.
        "TEST": {
            "NAME": env_str("TORUS_TEST_DATABASE_NAME", f"test_{unquote(url.path.lstrip('/'))}")
        },
    }
