"""Rolling updates on the real Slurm with the real engine: the followed alias moves, new
replicas start and become READY before the old ones are drained and stopped; a PATCH to a
pinned version rolls the same way. (The zero-failed-requests traffic part is the gateway's
test: tests/serving/test_gateway*.py.)"""

import time

import pytest
from django.urls import reverse

from apps.registry.aliases import alias_set
from apps.serving.models import Deployment, DeploymentEvent
from apps.tenancy.access import actor_for_user
from apps.tenancy.models import Role
from tests.serving.conftest import deploy, event_kinds, register_gguf, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def rolled_to(number: int, replicas: int):
    def done(d: Deployment) -> bool:
        live = d.replicas.exclude(state="STOPPED")
        return (
            d.state == "READY"
            and d.version.number == number
            and live.count() == replicas
            and all(r.version.number == number and r.state == "READY" for r in live)
        )

    return done


def check_sequence(deployment_id, *, old: int, new: int, replicas: int) -> None:
    """Every old replica was drained only after `replicas` new ones were READY, and stopped."""
    deployment = Deployment.objects.get(pk=deployment_id)
    fresh = list(deployment.replicas.filter(version__number=new, ready_at__isnull=False))
    stale = list(deployment.replicas.filter(version__number=old))
    assert len(fresh) >= replicas and stale
    enough_ready = sorted(r.ready_at for r in fresh)[replicas - 1]
    for replica in stale:
        assert replica.state == "STOPPED", (replica.state, replica.state_reason)
        assert replica.stopped_at >= enough_ready, (replica.stopped_at, enough_ready)
    events = list(
        DeploymentEvent.objects.filter(deployment=deployment)
        .order_by("created_at")
        .values_list("kind", "data")
    )
    started = max(i for i, (kind, data) in enumerate(events) if kind == "rollout_started")
    assert events[started][1] == {"from": old, "to": new}
    after = [kind for kind, _ in events[started:]]
    assert after[-1] == "rollout_done", after
    # new replicas ready before the first old one stopped
    assert after.index("replica_ready") < after.index("replica_stopped"), after
    assert after.count("replica_stopped") >= len(stale), after


def test_moving_the_followed_alias_rolls_the_replicas_over(
    acme, gguf_version, tiny_gguf, serving_loop
):
    client = acme.client(Role.MEMBER)
    made = deploy(client, acme.project, replicas=2, context=512, slots=2)
    assert made["follow_alias"] == "production"
    wait_for(made["id"], condition=rolled_to(1, 2), timeout=180, what="v1 on 2 replicas")

    second = register_gguf(acme, tiny_gguf, alias=None)  # version 2, not yet aliased
    assert second.number == 2
    actor = actor_for_user(user=acme.users[Role.MEMBER])
    alias_set(actor=actor, model=second.model, name="production", version=second)

    wait_for(made["id"], condition=rolled_to(2, 2), timeout=240, what="v2 on 2 replicas")
    check_sequence(made["id"], old=1, new=2, replicas=2)
    shown = client.get(reverse("deployment-detail", args=[made["id"]])).json()
    assert shown["version"]["number"] == 2 and shown["ref"] == "tiny@production"

    # a PATCH to a pinned version: rolls back the same way and stops following the alias
    url = reverse("deployment-detail", args=[made["id"]])
    response = client.patch(url, {"model": "tiny:1"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "UPDATING" and response.json()["follow_alias"] == ""
    wait_for(made["id"], condition=rolled_to(1, 2), timeout=240, what="back to v1")
    assert event_kinds(made["id"]).count("rollout_done") == 2
    # pinned: the alias moving on to version 3 leaves it alone
    third = register_gguf(acme, tiny_gguf)
    assert third.number == 3
    time.sleep(3)  # several reconciler passes
    deployment = Deployment.objects.get(pk=made["id"])
    assert deployment.follow_alias == "" and deployment.version.number == 1
    assert event_kinds(made["id"]).count("rollout_started") == 2
