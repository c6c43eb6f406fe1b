"""A failing webhook target beside a working one, delivered by a real Celery worker: the
working one gets its delivery, the failing one is counted (one item per webhook) and logged
once, and its next delivered try clears it."""

from apps.core.models import PassCounter, PassFailure
from apps.registry.models import WebhookDelivery
from apps.tenancy.models import Role
from tests.registry.test_api import create_model, upload_version
from tests.registry.test_webhooks import add_hook, receiver, settled, wait_for  # noqa: F401


def test_a_failing_target_is_counted_and_a_working_one_delivered(
    acme,
    models_area,
    celery_worker,
    receiver,  # noqa: F811
    settings,
):
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    settings.TORUS_WEBHOOK_BACKOFF_SECONDS = 0
    settings.TORUS_WEBHOOK_MAX_ATTEMPTS = 3
    failing, working = receiver(replies=(500,)), receiver(replies=(200,))
    bad = add_hook(acme, failing.url, events=["model_version.created"])
    good = add_hook(acme, working.url, events=["model_version.created"])
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(client, model["id"], {"w.bin": b"w"})
    wait_for(settled(count=2))

    delivered = WebhookDelivery.objects.get(webhook_id=good["id"])
    assert (delivered.state, delivered.attempts) == ("succeeded", 1)
    assert len(working.requests) == 1
    refused = WebhookDelivery.objects.get(webhook_id=bad["id"])
    assert (refused.state, refused.attempts, refused.error) == ("failed", 3, "HTTP 500")
    failure = PassFailure.objects.get(pass_name="webhooks", item_key=f"webhook:{bad['id']}")
    assert (failure.count, failure.error) == (3, "HTTP 500")
    assert not PassFailure.objects.filter(item_key=f"webhook:{good['id']}").exists()
    assert PassCounter.objects.get(pass_name="webhooks").failures == 3

    # the target answers again: its next delivery clears the failure
    failing.replies = [200]
    upload_version(client, model["id"], {"w.bin": b"w2"})
    wait_for(settled(count=4))
    assert not PassFailure.objects.filter(pass_name="webhooks").exists()
