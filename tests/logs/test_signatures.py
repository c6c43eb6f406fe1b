"""Failure signatures: failed attempts are tagged with what their logs matched."""

import pytest
from django.urls import reverse

from apps.jobs.models import JobAttempt
from apps.logs.shipper import ship_pass
from apps.logs.signatures import scan_pending
from apps.tenancy.models import Role
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def failed_job(world, cluster, logs_dir, name: str, output: str):
    job = make_job(
        project=world.project,
        user=world.users[Role.MEMBER],
        state="FAILED",
        cluster=cluster,
        name=name,
    )
    JobAttempt.objects.create(
        job=job,
        number=1,
        state="FAILED",
        nodes=["n1"],
        stdout_path=str(logs_dir / f"{name}.out"),
        stderr_path=str(logs_dir / f"{name}.err"),
    )
    (logs_dir / f"{name}.out").write_text("starting\n")
    (logs_dir / f"{name}.err").write_text(output)
    return job


def test_failed_attempts_are_tagged_listed_and_counted(es, acme, globex, cluster, logs_dir):
    admin = acme.client(Role.ADMIN)
    for name, query in [("oom", '"CUDA out of memory"'), ("nccl", "NCCL error")]:
        response = admin.post(reverse("failure-signature-list"), {"name": name, "query": query})
        assert response.status_code == 201, response.content
    oom = failed_job(
        acme,
        cluster,
        logs_dir,
        "train-a",
        'Traceback (most recent call last):\n  File "t.py", line 1\n'
        "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n",
    )
    nccl = failed_job(acme, cluster, logs_dir, "train-b", "NCCL error: unhandled system error\n")
    other = failed_job(globex, cluster, logs_dir, "train-c", "CUDA out of memory\n")
    ship_pass()
    es.indices.refresh(index="torus-logs-*")
    assert scan_pending() == 3
    assert scan_pending() == 0  # once per attempt
    viewer = acme.client(Role.VIEWER)
    detail = viewer.get(reverse("job-detail", kwargs={"pk": oom.pk})).json()
    assert detail["signatures"] == ["oom"]
    assert viewer.get(reverse("job-detail", kwargs={"pk": nccl.pk})).json()["signatures"] == [
        "nccl"
    ]
    listed = viewer.get(reverse("job-list"), {"signature": "oom"}).json()["results"]
    assert [row["name"] for row in listed] == ["train-a"]
    stats = viewer.get(reverse("failure-signature-stats")).json()["results"]
    assert {(row["name"], row["jobs"]) for row in stats} == {("oom", 1), ("nccl", 1)}
    # globex has no signatures: its job is scanned but tagged with nothing of acme's
    globex_detail = globex.client(Role.VIEWER).get(reverse("job-detail", kwargs={"pk": other.pk}))
    assert globex_detail.json()["signatures"] == []


def test_a_signature_needs_a_query_and_a_unique_name(acme):
    admin = acme.client(Role.ADMIN)
    assert (
        admin.post(reverse("failure-signature-list"), {"name": "x", "query": " "}).status_code
        == 400
    )
    assert (
        admin.post(reverse("failure-signature-list"), {"name": "x", "query": "a"}).status_code
        == 201
    )
    assert (
        admin.post(reverse("failure-signature-list"), {"name": "x", "query": "b"}).status_code
        == 409
    )
    assert (
        acme.client(Role.MEMBER)
        .post(reverse("failure-signature-list"), {"name": "y", "query": "b"})
        .status_code
        == 403
    )


@pytest.mark.django_db(transaction=True)
def test_cli_searches_logs_across_jobs(es, live_server, acme, cluster, logs_dir):
    from tests.sdk.cli import run_cli

    failed_job(acme, cluster, logs_dir, "train-z", "NCCL error: remote process exited\n")
    ship_pass()
    es.indices.refresh(index="torus-logs-*")
    env = {"TORUS_URL": live_server.url, "TORUS_TOKEN": acme.tokens[Role.VIEWER]}
    result = run_cli("logs", "search", "NCCL", "--project", acme.project.slug, env=env)
    assert result.returncode == 0, result.stderr
    assert "NCCL error: remote process exited" in result.stdout
    assert "(1 matching lines)" in result.stderr
