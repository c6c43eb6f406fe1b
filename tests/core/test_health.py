"""/healthz and /readyz against the real PostgreSQL, Redis and a real Celery worker."""

import pytest
from django.test import Client

from apps.core.tasks import ping


def test_healthz_answers_without_dependencies():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db(transaction=True)
def test_readyz_reports_each_dependency(celery_worker):
    response = Client().get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert {name: check["status"] for name, check in body["checks"].items()} == {
        "database": "ok",
        "redis": "ok",
        "celery": "ok",
        "clusters": "ok",
        "elasticsearch": "ok",
        "s3": "ok",
    }
    assert ping.delay().get(timeout=10) == "pong"


@pytest.mark.django_db(transaction=True)
def test_readyz_is_503_naming_the_dependency_that_does_not_answer(celery_worker, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = Client().get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["status"] == "error"
    assert "Connection" in checks["redis"]["error"]
    assert checks["database"]["status"] == "ok"


@pytest.mark.django_db
def test_readyz_names_elasticsearch_when_it_does_not_answer(settings):
    settings.TORUS_ELASTICSEARCH_URL = "http://127.0.0.1:9"
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["elasticsearch"]["status"] == "error"


@pytest.mark.django_db
def test_readyz_is_503_without_a_worker():
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["celery"] == {
        "status": "error",
        "error": "RuntimeError: no Celery worker answered",
        "ms": response.json()["checks"]["celery"]["ms"],
    }
