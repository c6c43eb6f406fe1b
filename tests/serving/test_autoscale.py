"""Autoscaling and scale to zero on the real Slurm with the real engine: concurrent long
requests fill a one-slot replica, the decision to add a replica is read from its /metrics and
recorded with those figures; without load it scales back down; a deployment without requests
goes to zero, and a wake brings one replica back with the cold-start time recorded."""

import threading

import httpx
import pytest
from django.test import override_settings
from django.urls import reverse

from apps.jobs.models import Job
from apps.serving import autoscale, routes, services
from apps.serving.keys import engine_key
from apps.serving.models import DeploymentEvent
from apps.serving.replicas import parse_metrics
from apps.tenancy.models import Role
from tests.serving.conftest import deploy, event_kinds, wait_for, wait_ready

pytestmark = pytest.mark.django_db(transaction=True)


def test_desired_for_load_between_min_and_max():
    assert autoscale.desired_for_load(load=0, slots=4, target=1, low=1, high=3) == 1
    assert autoscale.desired_for_load(load=5, slots=4, target=1, low=1, high=3) == 2
    assert autoscale.desired_for_load(load=100, slots=4, target=1, low=1, high=3) == 3
    assert autoscale.desired_for_load(load=3, slots=2, target=0.5, low=2, high=8) == 3


def test_metrics_are_read_from_the_engines_prometheus_text():
    text = (
        "# HELP llamacpp:requests_processing Number of requests processing.\n"
        "# TYPE llamacpp:requests_processing gauge\n"
        "llamacpp:requests_processing 2\n"
        "llamacpp:requests_deferred 3\n"
        "llamacpp:n_busy_slots_per_decode 1.996\n"
        "llamacpp:prompt_tokens_total 1234\n"
    )
    assert parse_metrics(text) == {
        "processing": 2.0,
        "deferred": 3.0,
        "busy_slots_per_decode": 1.996,
    }


def load(replica, *, clients: int, tokens: int, stop: threading.Event) -> list[threading.Thread]:
    """`clients` threads each sending long completions to the replica until `stop`."""
    url = f"http://{replica.host}:{replica.port}/v1/completions"
    headers = {"Authorization": f"Bearer {engine_key(deployment_id=replica.deployment_id)}"}
    body = {"prompt": "Once upon a time", "max_tokens": tokens, "ignore_eos": True}

    def send() -> None:
        while not stop.is_set():
            try:
                httpx.post(url, json=body, headers=headers, timeout=120)
            except httpx.HTTPError:
                return  # the replica went away (scaled down): done

    threads = [threading.Thread(target=send, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    return threads


@override_settings(TORUS_SERVING_SCALE_DOWN_AFTER_S=3)
def test_load_on_the_engine_scales_up_and_its_end_scales_down(acme, gguf_version, serving_loop):
    client = acme.client(Role.MEMBER)
    made = deploy(
        client,
        acme.project,
        replicas=1,
        replicas_min=1,
        replicas_max=2,
        slots=1,
        context=1024,
        autoscale_target=1,
    )
    first = wait_ready(made["id"], replicas=1).replicas.get(state="READY")
    stop = threading.Event()
    threads = load(first, clients=3, tokens=400, stop=stop)
    try:
        wait_for(
            made["id"],
            condition=lambda d: d.replicas.filter(state="READY").count() == 2,
            timeout=180,
            what="a second READY replica",
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    up = DeploymentEvent.objects.filter(deployment_id=made["id"], kind="scaled_up").first()
    assert up is not None, event_kinds(made["id"])
    data = up.data
    assert data["by"] == "autoscale" and (data["from"], data["to"]) == (1, 2)
    # what the engine reported: one request decoding in its one slot, the others waiting
    assert data["requests_processing"] >= 1 and data["requests_deferred"] >= 1, data
    assert data["per_replica"][str(first.pk)]["deferred"] >= 1, data
    assert "waiting" in up.message
    shown = client.get(reverse("deployment-events", args=[made["id"]])).json()["results"]
    assert any(e["kind"] == "scaled_up" and e["data"] == data for e in shown)

    # no load: after the cool-down it goes back to one replica, the other drained and stopped
    wait_for(
        made["id"],
        condition=lambda d: (
            d.replicas_desired == 1 and d.replicas.exclude(state="STOPPED").count() == 1
        ),
        timeout=120,
        what="back to one replica",
    )
    down = DeploymentEvent.objects.get(deployment_id=made["id"], kind="scaled_down")
    assert (down.data["from"], down.data["to"]) == (2, 1)
    assert down.data["requests_deferred"] == 0


def test_no_requests_scale_to_zero_and_a_wake_brings_one_back(acme, gguf_version, serving_loop):
    client = acme.client(Role.MEMBER)
    made = deploy(client, acme.project, replicas=1, scale_to_zero_after_s=10, context=512)
    assert made["replicas"]["min"] == 0
    first = wait_ready(made["id"], replicas=1).replicas.get(state="READY")
    idle = wait_for(
        made["id"],
        condition=lambda d: d.state == "IDLE" and not d.replicas.exclude(state="STOPPED"),
        timeout=120,
        what="IDLE with no replica",
    )
    assert idle.replicas_desired == 0
    assert Job.objects.get(pk=first.job_id).state == "CANCELLED"
    zero = DeploymentEvent.objects.get(deployment_id=made["id"], kind="scaled_to_zero")
    assert zero.data["idle_s"] >= 10
    assert routes.build(deployment_id=made["id"])["replicas"] == []

    services.wake(deployment_id=made["id"])  # what the gateway does on a request
    services.wake(deployment_id=made["id"])  # a second request meanwhile: one wake
    second = wait_ready(made["id"], replicas=1).replicas.get(state="READY")
    assert second.pk != first.pk
    [woken] = DeploymentEvent.objects.filter(deployment_id=made["id"], kind="woken")
    assert woken.data["cold_start_s"] > 0, woken.data
    print(f"\nserving: cold start from zero {woken.data['cold_start_s']:.2f} s")  # for the docs
    assert "first replica ready after" in woken.message
    shown = client.get(reverse("deployment-detail", args=[made["id"]])).json()
    assert shown["state"] == "READY" and shown["replicas"]["desired"] == 1
    kinds = event_kinds(made["id"])
    assert kinds.count("scaled_to_zero") == 1 and kinds.count("woken") == 1
