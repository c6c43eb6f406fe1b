"""Logs on an Elasticsearch cluster of three nodes (the scale profile's, TORUS_ES_NODES=3,
started by the same component script in a folder of its own): a node SIGKILLed while a job
writes, the one that holds the index's primary, loses no line, and search through the API
answers all the while."""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from django.test import override_settings

from apps.logs.es import client
from apps.logs.index import template_install
from apps.logs.models import LogCursor
from apps.tenancy.models import Role
from tests.logs.conftest import count
from tests.logs.test_shipper import ROOT, finish, shipper_process, write
from tests.stack import portal_env

COMPONENT = ROOT / "platform" / "services" / "components" / "elasticsearch"
NODES = 3


def _free_ports() -> int:
    """An HTTP port such that it, the next two and their transport ports (+100) are free."""
    for base in range(19210, 19290, 3):
        ports = [base + i for i in range(NODES)] + [base + 100 + i for i in range(NODES)]
        if all(_free(port) for port in ports):
            return base
    raise AssertionError("no free ports for a three-node Elasticsearch")


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def es_cluster(tmp_path_factory):
    """Three nodes on their own ports and data; their URLs, comma-separated, and the folder."""
    var = tmp_path_factory.mktemp("es-cluster")
    base = _free_ports()
    env = {
        **os.environ,
        "TORUS_VAR_DIR": str(var),
        "TORUS_ES_PORT": str(base),
        "TORUS_ES_NODES": str(NODES),
        "TORUS_ES_HEAP": "512m",
        "TORUS_ES_WAIT_SECONDS": "240",
    }
    try:
        for step in ("install", "start", "wait"):
            subprocess.run([str(COMPONENT), step], env=env, check=True, timeout=300)
        urls = ",".join(f"http://127.0.0.1:{base + i}" for i in range(NODES))
        yield urls, (var / "elasticsearch").resolve()
    finally:
        subprocess.run([str(COMPONENT), "stop"], env=env, timeout=300)
        # the data may live where torus-es can reach it: a folder of its own under
        # /var/lib/torus that the test's folder links to
        data = (var / "elasticsearch").resolve()
        shutil.rmtree(data if data.parent == var.resolve() else data.parent, ignore_errors=True)


def _kill_primary_node(es, *, root: Path, index: str) -> str:
    """SIGKILL the node that holds the index's primary shard; its name."""
    shard = next(s for s in es.cat.shards(index=index, format="json") if s["prirep"] == "p")
    number = int(shard["node"].rsplit("-", 1)[1])
    pidfile = root / "run" / ("elasticsearch.pid" if number == 1 else f"elasticsearch-{number}.pid")
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    return shard["node"]


@pytest.mark.django_db(transaction=True)
def test_a_node_lost_loses_no_line_and_search_answers(es_cluster, acme, attempt):
    urls, root = es_cluster
    member = acme.client(Role.MEMBER)
    with override_settings(TORUS_ELASTICSEARCH_URL=urls):
        es = client()
        template_install()
        shipper = shipper_process(
            portal_env(
                TORUS_ELASTICSEARCH_URL=urls,
                TORUS_SHIPPER_READ_BYTES="65536",
                TORUS_SHIPPER_LEASE_SECONDS="1",
            )
        )
        try:
            write(attempt, b"".join(b"before %d\n" % i for i in range(20_000)))
            _wait(lambda: count(attempt=attempt) == 20_000, "the first lines were not shipped")
            es.cluster.health(wait_for_status="green", timeout="60s")  # a replica of each
            index = next(iter(es.indices.get(index="torus-logs-acme-*")))
            killed = _kill_primary_node(es, root=root, index=index)
            i = 0
            for _ in range(10):  # the job goes on writing; its researcher goes on searching
                write(attempt, b"".join(b"during %d\n" % n for n in range(i, i + 2000)))
                i += 2000
                found = member.get("/api/v1/logs/search/", {"q": "before 1234"})
                assert found.status_code == 200, found.content
                assert any(hit["message"] == "before 1234" for hit in found.json()["hits"]), (
                    found.json()
                )
                time.sleep(1)
            finish(attempt)
            _wait(
                lambda: LogCursor.objects.get(attempt=attempt, stream="stdout").complete,
                "the shipper did not catch up",
            )
        finally:
            os.killpg(shipper.pid, signal.SIGKILL)
            shipper.wait()
        health = es.cluster.health(wait_for_status="yellow", timeout="60s")
        assert health["number_of_nodes"] == NODES - 1, (killed, health)
        assert count(attempt=attempt) == 20_000 + i
        assert count(attempt=attempt, query="during 19999") == 1


def _wait(done, message: str, *, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, message
        time.sleep(0.5)
