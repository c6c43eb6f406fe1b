"""Health and self-healing on the real Slurm with the real engine: a replica whose job is
killed on the cluster, one that stops answering /health, and one the gateway reports are
each replaced; a model whose replicas cannot start fails the deployment instead of looping."""

import contextlib
import os
import signal
import time

import pytest
from django.test import override_settings
from django.urls import reverse

from apps.jobs.models import Job
from apps.notifications.messages import text
from apps.notifications.models import Notification
from apps.serving import routes, services
from apps.serving.models import Deployment, Replica
from apps.tenancy.models import Role
from tests.jobs.conftest import slurm
from tests.serving.conftest import (
    deploy,
    engine_pid,
    event_kinds,
    register_gguf,
    wait_for,
    wait_ready,
)

pytestmark = pytest.mark.django_db(transaction=True)


def backend_id(replica: Replica) -> str:
    return replica.job.attempts.order_by("-number").first().backend_id


def replaced(deployment_id, old: Replica):
    """Wait for a READY replica other than `old`, with `old` stopped."""

    def done(d: Deployment) -> bool:
        old.refresh_from_db()
        fresh = d.replicas.filter(state="READY").exclude(pk=old.pk)
        return old.state == "STOPPED" and fresh.exists() and d.state == "READY"

    deployment = wait_for(deployment_id, condition=done, timeout=180, what="a replacement")
    return deployment.replicas.get(state="READY")


def test_a_replica_whose_job_is_killed_is_replaced(acme, gguf_version, serving_loop):
    made = deploy(acme.client(Role.MEMBER), acme.project, context=512, slots=2)
    first = wait_ready(made["id"], replicas=1).replicas.get(state="READY")
    slurm("scancel", backend_id(first))
    second = replaced(made["id"], first)
    assert second.job_id != first.job_id and second.version == first.version
    first.refresh_from_db()
    assert "its job ended: CANCELLED" in first.state_reason, first.state_reason
    assert Job.objects.get(pk=first.job_id).state == "CANCELLED"
    kinds = event_kinds(made["id"])
    # seen either way: the job's end on the cluster, or /health failing first
    noticed = "replica_replaced" if "replica_replaced" in kinds else "replica_unhealthy"
    assert kinds.count("replica_ready") == 2 and noticed in kinds, kinds
    assert kinds.index(noticed) < len(kinds) - 1 - kinds[::-1].index("replica_ready")
    # serving, then not (no replica ready), then again: failing once, then recovered
    assert kinds.count("failing") == 1 and kinds.index("failing") < kinds.index("recovered")
    # the route table the gateway reads has only the new replica
    route = routes.build(deployment_id=made["id"])
    assert [r["id"] for r in route["replicas"]] == [str(second.pk)]


@override_settings(TORUS_SERVING_HEALTH_FAILURES=2)
def test_a_replica_that_stops_answering_is_replaced(acme, gguf_version, serving_loop):
    made = deploy(acme.client(Role.MEMBER), acme.project, context=512, slots=2)
    first = wait_ready(made["id"], replicas=1).replicas.get(state="READY")
    pid = engine_pid(first.port)
    os.kill(pid, signal.SIGSTOP)  # alive, holding its port, answering nothing
    try:
        second = replaced(made["id"], first)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # let its cancelled job end if it has not yet
    first.refresh_from_db()
    assert "/health failed 2 times" in first.state_reason or "job ended" in first.state_reason
    assert "replica_unhealthy" in event_kinds(made["id"])
    assert second.pk != first.pk


def test_a_replica_the_gateway_reports_leaves_the_routes_at_once(acme, gguf_version, serving_loop):
    made = deploy(acme.client(Role.MEMBER), acme.project, context=512, slots=2)
    first = wait_ready(made["id"], replicas=1).replicas.get(state="READY")
    routes.publish(deployment_id=made["id"])
    services.report_replica_failure(replica_id=first.pk, reason="connection reset")
    first.refresh_from_db()
    assert first.state == "UNHEALTHY" and "connection reset" in first.state_reason
    assert routes.build(deployment_id=made["id"])["replicas"] == []
    services.report_replica_failure(replica_id=first.pk, reason="again")  # no-op now
    second = replaced(made["id"], first)
    assert Job.objects.get(pk=first.job_id).state == "CANCELLED"
    assert second.pk != first.pk


@override_settings(TORUS_SERVING_MAX_START_FAILURES=2)
def test_a_model_that_cannot_start_fails_the_deployment(
    acme, serving_area, tiny_gguf, tmp_path, serving_loop
):
    """The header reads (the fit check passes) but the tensors are cut off: every replica's
    engine exits; after two in a row the deployment is FAILED, with no third job."""
    broken = tmp_path / "broken.gguf"
    data = tiny_gguf.read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    register_gguf(acme, broken, name="broken")
    told = acme.client(Role.MEMBER).post(
        reverse("subscription-list"),
        {"events": ["deploy_failing", "deploy_recovered"], "channel": "inapp",
         "project": str(acme.project.pk)},
        format="json",
    )  # fmt: skip
    assert told.status_code == 201, told.content
    made = deploy(acme.client(Role.MEMBER), acme.project, name="broken", model="broken:1")
    deployment = wait_for(
        made["id"], condition=lambda d: d.state == "FAILED", timeout=180, what="FAILED"
    )
    assert "2 replicas in a row ended before they were ready" in deployment.state_reason
    assert Replica.objects.filter(deployment=deployment).count() == 2
    assert event_kinds(made["id"])[-1] == "failed"

    # another version of the model (a sound file) starts it again
    register_gguf(acme, tiny_gguf, name="broken", alias=None)
    client = acme.client(Role.MEMBER)
    url = reverse("deployment-detail", args=[made["id"]])
    response = client.patch(url, {"model": "broken:2"}, format="json")
    assert response.status_code == 200, response.content
    deployment = wait_ready(made["id"], replicas=1)
    assert deployment.version.number == 2 and deployment.state_reason == ""
    # its subscribers were told it failed, once, and that it recovered
    kinds = event_kinds(made["id"])
    assert kinds.count("failed") == 1 and kinds[-1] == "recovered", kinds
    told = [("deploy_failing", made["id"], "broken"), ("deploy_recovered", made["id"], "broken")]
    deadline = time.monotonic() + 10  # the message is made once the pass has committed
    while True:
        items = [i for n in Notification.objects.order_by("created_at") for i in n.items]
        if [(i["event"], i["deployment"], i["name"]) for i in items] == told:
            break
        assert time.monotonic() < deadline, items
        time.sleep(0.2)
    assert "2 replicas in a row ended before they were ready" in items[0]["reason"]
    assert text(items[:1]).startswith(f"Deployment broken ({made['id']}) in ")
