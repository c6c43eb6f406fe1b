"""Liveness (/healthz) and readiness (/readyz, each dependency with its own status) probes."""

import time
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse

# Dependency checks: name -> callable raising on failure. Later services add theirs here.
CHECKS: dict[str, Callable[[], None]] = {}


def check(name: str):
    def register(func: Callable[[], None]) -> Callable[[], None]:
        CHECKS[name] = func
        return func

    return register


# What /readyz reports beside the checks without deciding readiness (the builds still going
# on, say): name -> callable returning JSON data.
DETAILS: dict[str, Callable[[], object]] = {}


def detail(name: str):
    def register(func: Callable[[], object]) -> Callable[[], object]:
        DETAILS[name] = func
        return func

    return register


@check("database")
def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


@check("redis")
def _redis() -> None:
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


@check("celery")
def _celery() -> None:
    from config.celery import app

    replies = app.control.ping(timeout=settings.TORUS_READYZ_CELERY_TIMEOUT, limit=1)
    if not replies:
        raise RuntimeError("no Celery worker answered")


def healthz(request):
    return JsonResponse({"status": "ok"})


def readyz(request):
    results, ready = {}, True
    for name, func in CHECKS.items():
        started = time.monotonic()
        try:
            func()
            results[name] = {"status": "ok"}
        except Exception as exc:  # any failure of a dependency makes the process not ready
            ready = False
            results[name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
        results[name]["ms"] = round((time.monotonic() - started) * 1000, 1)
    body = {"status": "ok" if ready else "unavailable", "checks": results}
    for name, func in DETAILS.items():
        try:
            body[name] = func()
        except Exception as exc:  # a detail that cannot be read says so; readiness stands
            body[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return JsonResponse(body, status=200 if ready else 503)
