"""Fixtures for logs on the real Elasticsearch."""

import re

import pytest

from apps.logs.es import client, index_pattern
from apps.logs.index import template_install
from tests.factories import make_running_attempt


def delete_tenant_indices(slug: str) -> None:
    """The tenant's daily indices; not those of a longer slug the pattern also reaches
    (acme's reaches acme-w1's, another xdist worker's: tests/lanes.py)."""
    names = client().indices.get(
        index=index_pattern(slug), allow_no_indices=True, ignore_unavailable=True
    )
    day = re.compile(rf"{re.escape(index_pattern(slug)[:-1])}\d{{4}}\.\d{{2}}\.\d{{2}}")
    for name in names:
        if day.fullmatch(name):
            client().indices.delete(index=name)


@pytest.fixture
def es(acme, globex):
    """Elasticsearch with the template installed; the test tenants' indices removed after."""
    assert client().cluster.health(wait_for_status="yellow", timeout="30s")["status"] != "red"
    template_install()
    slugs = (acme.tenant.slug, globex.tenant.slug)  # this worker's (tests/lanes.py)
    for slug in slugs:
        delete_tenant_indices(slug)
    yield client()
    for slug in slugs:
        delete_tenant_indices(slug)


@pytest.fixture
def attempt(acme, cluster, logs_dir):
    """A running attempt whose output files are in the test's folder."""
    return make_running_attempt(world=acme, cluster=cluster, directory=logs_dir)


def count(*, attempt=None, job=None, query: str | None = None) -> int:
    client().indices.refresh(index="torus-logs-*")
    must = []
    if attempt is not None:
        must.append({"term": {"attempt": str(attempt.pk)}})
    if job is not None:
        must.append({"term": {"job": str(job.pk)}})
    if query:
        must.append({"match_phrase": {"message": query}})
    body = {"query": {"bool": {"filter": must}}}
    return client().count(index="torus-logs-*", **body)["count"]


@pytest.fixture
def shipper_loop(es):
    """The log shipper making a pass every 0.1 s in a thread, as `manage.py run_shipper`."""
    from apps.logs.shipper import ship_pass
    from tests.conftest import background_loop

    with background_loop(ship_pass, interval=0.1):
        yield


from tests.jobs.conftest import control_loop, slurm_cluster  # noqa: E402, F401  (fixtures)
