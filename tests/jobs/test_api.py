"""The jobs API: list filters, detail, logs endpoint validation, clusters and nodes."""

import pytest
from django.urls import reverse

from apps.tenancy.models import Role
from tests.factories import ProjectFactory, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs(acme, cluster):
    other = ProjectFactory(tenant=acme.tenant, slug="speech")
    member, admin = acme.users[Role.MEMBER], acme.users[Role.ADMIN]
    return {
        "a": make_job(
            project=acme.project,
            user=member,
            name="a",
            state="RUNNING",
            labels={"team": "vision"},
            cluster=cluster,
        ),
        "b": make_job(project=acme.project, user=admin, name="b", state="FAILED", cluster=cluster),
        "c": make_job(
            project=other,
            user=member,
            name="c",
            state="PENDING",
            labels={"team": "speech"},
            cluster=cluster,
        ),
    }


def names(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {row["name"] for row in response.json()["results"]}


def test_list_filters(acme, jobs):
    client = acme.client(Role.VIEWER)
    url = reverse("job-list")
    assert names(client.get(url)) == {"a", "b", "c"}
    assert names(client.get(url, {"state": "RUNNING,PENDING"})) == {"a", "c"}
    assert names(client.get(url, {"project": "speech"})) == {"c"}
    assert names(client.get(url, {"project": str(acme.project.id)})) == {"a", "b"}
    assert names(client.get(url, {"user": "acme-admin"})) == {"b"}
    assert names(client.get(url, {"label": "team=vision"})) == {"a"}
    ordered = client.get(url, {"ordering": "name"}).json()["results"]
    assert [row["name"] for row in ordered] == ["a", "b", "c"]


def test_bad_filters_are_400s(acme, jobs):
    client = acme.client(Role.VIEWER)
    response = client.get(reverse("job-list"), {"state": "DANCING"})
    assert response.status_code == 400 and "state" in response.json()["error"]["fields"]
    response = client.get(reverse("job-list"), {"label": "no-equals-sign"})
    assert response.status_code == 400 and "label" in response.json()["error"]["fields"]


def test_logs_endpoint_validates_its_parameters(acme, jobs):
    url = reverse("job-output-logs", kwargs={"pk": jobs["a"].pk})
    client = acme.client(Role.VIEWER)
    assert client.get(url, {"stream": "stdin"}).status_code == 400
    assert client.get(url, {"offset": -1}).status_code == 400
    response = client.get(url, {"attempt": 9})
    assert response.status_code == 400 and "attempt" in response.json()["error"]["fields"]
    empty = client.get(url).json()  # no attempt yet: nothing to read
    assert empty == {
        "attempt": None,
        "stream": "stdout",
        "offset": 0,
        "next_offset": 0,
        "data": "",
        "complete": True,
    }


def test_logs_never_split_a_character(acme, jobs, logs_dir):
    attempt = jobs["a"].attempts.create(
        number=1,
        state="RUNNING",
        stdout_path=str(logs_dir / "out.log"),
        stderr_path=str(logs_dir / "err.log"),
    )
    (logs_dir / "out.log").write_bytes("héllo wörld\n".encode())
    url = reverse("job-output-logs", kwargs={"pk": jobs["a"].pk})
    client = acme.client(Role.VIEWER)
    text, offset = "", 0
    while True:
        chunk = client.get(url, {"offset": offset, "limit": 2}).json()
        if chunk["next_offset"] == offset:
            break
        text, offset = text + chunk["data"], chunk["next_offset"]
    assert text == "héllo wörld\n" and attempt.number == 1


def test_clusters_and_nodes_are_readable_by_everyone_signed_in(acme, cluster):
    client = acme.client(Role.VIEWER)
    clusters = client.get(reverse("cluster-list")).json()["results"]
    assert clusters[0]["name"] == "test" and clusters[0]["partitions"][0]["name"] == "gpu"
    nodes = client.get(reverse("node-list"), {"cluster": "test"}).json()["results"]
    assert {n["name"] for n in nodes} == {"n1", "n2"}
    assert nodes[0]["accelerators"] == {"gpu": {"": 4}}
    assert client.post(reverse("cluster-list"), {}).status_code == 405
