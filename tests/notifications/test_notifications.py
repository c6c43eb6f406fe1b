"""Notifications: a job's state changes reach the people subscribed to it, its project or
their own jobs, by e-mail through a real SMTP server (aiosmtpd) and by webhook to a real HTTP
receiver; a failed job's message carries its last lines; a burst is one message a minute, many
jobs one digest an hour; a channel that is down is retried and shown to its owner without
holding any other; bad subscriptions are 400s naming the field."""

import re
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from apps.core import telemetry
from apps.jobs.estimates import estimates_refresh
from apps.jobs.models import Job, JobAttempt
from apps.jobs.transitions import job_transition
from apps.notifications.models import Notification, Subscription
from apps.notifications.tasks import deliver
from apps.registry.webhooks import verify
from apps.tenancy.models import Membership, Role
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)


def _job(world, cluster, *, name="train", state="RUNNING", user_role=Role.MEMBER) -> Job:
    return make_job(
        project=world.project,
        user=world.users[user_role],
        state=state,
        cluster=cluster,
        name=name,
    )


def _to(job: Job, state: str, reason: str = "") -> None:
    """A state change committed as the platform commits one (its announcers run after)."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        job_transition(job=locked, to=state, reason=reason)


def _subscribe(world, role=Role.MEMBER, **body) -> dict:
    response = world.client(role).post(reverse("subscription-list"), body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _pending(subscription_id) -> list[Notification]:
    return list(Notification.objects.filter(subscription_id=subscription_id, state="PENDING"))


def _send_all(subscription_id) -> list[str]:
    return [deliver(str(n.pk)) for n in _pending(subscription_id)]


def test_a_failed_job_is_mailed_with_its_reason_and_last_lines(
    acme, cluster, logs_dir, smtp_server
):
    job = _job(acme, cluster)
    lines = [f"step {i} loss {i / 10}" for i in range(30)] + ["CUDA out of memory"]
    (logs_dir / "out").write_text("\n".join(lines) + "\n")
    (logs_dir / "err").write_text("Traceback: RuntimeError\n")
    JobAttempt.objects.create(
        job=job,
        number=1,
        state="FAILED",
        stdout_path=str(logs_dir / "out"),
        stderr_path=str(logs_dir / "err"),
    )
    sub = _subscribe(
        acme, events=["failed"], channel="email", address="member@example.org",
        project=str(acme.project.pk),
    )  # fmt: skip
    assert "secret" not in sub or not sub["secret"]  # e-mail: no signing secret
    _to(job, "FAILED", "exit code 1")
    [notification] = _pending(sub["id"])
    assert deliver(str(notification.pk)) == "SENT"
    [mail] = smtp_server.messages()
    assert mail["Subject"] == "Torus: job train failed"
    assert mail["To"] == "member@example.org"
    assert mail["X-Torus-Notification"] == notification.key
    body = mail.get_payload()
    assert f"Job train ({job.pk}) in {acme.project.slug} failed: exit code 1" in body
    assert "[stdout] CUDA out of memory" in body and "[stderr] Traceback: RuntimeError" in body
    tail = body.split("Last lines:\n", 1)[1].splitlines()
    assert len(tail) == 20 and "[stdout] step 10 loss 1.0" not in tail  # the last 20 only
    assert deliver(str(notification.pk)) == ""  # sent: never twice


def test_only_the_subscribed_scope_and_events_are_told(acme, globex, cluster, smtp_server):
    mine = _job(acme, cluster, name="mine")
    theirs = _job(acme, cluster, name="theirs", user_role=Role.ADMIN)
    other_tenant = _job(globex, cluster, name="elsewhere")
    own = _subscribe(
        acme, events=["succeeded", "failed"], channel="email", address="me@example.org"
    )  # no project, no job: all of my own jobs
    one = _subscribe(
        acme, Role.VIEWER, events=["started"], channel="email", address="v@example.org",
        job=str(theirs.pk),
    )  # fmt: skip
    gone = _subscribe(
        acme, Role.ADMIN, events=["succeeded"], channel="email", address="gone@example.org",
        project=str(acme.project.pk),
    )  # fmt: skip
    Membership.objects.filter(tenant=acme.tenant, user=acme.users[Role.ADMIN]).delete()
    _to(mine, "SUCCEEDED")
    _to(theirs, "SUCCEEDED")  # not mine; the viewer wants only its start
    _to(other_tenant, "FAILED")
    assert [n.items[0]["name"] for n in _pending(own["id"])] == ["mine"]
    assert _pending(one["id"]) == []
    assert _pending(gone["id"]) == []  # left the tenant: told nothing more
    other = globex.client(Role.OWNER).post(
        reverse("subscription-list"),
        {"events": ["failed"], "channel": "email", "address": "x@example.org",
         "job": str(mine.pk)},
        format="json",
    )  # fmt: skip
    assert other.status_code == 404  # another tenant's job is not there
    listed = acme.client(Role.MEMBER).get(reverse("subscription-list")).json()
    assert [s["id"] for s in listed["results"]] == [own["id"]]  # one's own only


def test_a_burst_is_one_message_a_minute_and_many_jobs_one_digest(
    acme, cluster, smtp_server, settings
):
    settings.TORUS_NOTIFY_HOURLY_LIMIT = 3
    job = _job(acme, cluster, state="SUBMITTED")
    sub = _subscribe(
        acme, events=["started", "restarting", "failed"], channel="email", address="a@example.org"
    )
    _to(job, "RUNNING")
    assert _send_all(sub["id"]) == ["SENT"]
    _to(job, "RESTARTING", "attempt 1 ended NODE_FAIL on n2")
    _to(job, "QUEUED")
    _to(job, "SUBMITTED")
    _to(job, "RUNNING")
    [held] = _pending(sub["id"])  # within the minute: one message gathers them
    assert [i["event"] for i in held.items] == ["restarting", "started"]
    assert held.not_before >= timezone.now() + timedelta(seconds=50)
    assert deliver(str(held.pk)) == ""  # not due yet
    Notification.objects.filter(pk=held.pk).update(not_before=timezone.now())
    assert deliver(str(held.pk)) == "SENT"
    [second] = [m.get_payload() for m in smtp_server.messages() if "restarting" in m.get_payload()]
    assert "is restarting: attempt 1 ended NODE_FAIL on n2" in second and "started" in second

    others = [_job(acme, cluster, name=f"j{i}") for i in range(3)]
    _to(others[0], "FAILED")
    assert _send_all(sub["id"]) == ["SENT"]  # the third message this hour
    _to(others[1], "FAILED")
    _to(others[2], "FAILED")
    [digest] = _pending(sub["id"])  # past the limit: the rest in one digest at the hour's end
    assert digest.digest and [i["name"] for i in digest.items] == ["j1", "j2"]
    assert digest.not_before > timezone.now() + timedelta(minutes=55)
    Notification.objects.filter(pk=digest.pk).update(not_before=timezone.now())
    assert deliver(str(digest.pk)) == "SENT"
    subjects = [m["Subject"] for m in smtp_server.messages()]
    assert subjects.count("Torus: 2 job events in the last hour") == 1 and len(subjects) == 4


def test_a_channel_that_is_down_is_retried_and_shown_and_holds_no_other(
    acme, cluster, smtp_server, receiver, settings
):
    job = _job(acme, cluster)
    mail = _subscribe(acme, events=["failed"], channel="email", address="m@example.org")
    hook = _subscribe(acme, events=["failed"], channel="slack", address=receiver.url)
    smtp_server.process.terminate()
    smtp_server.process.wait(timeout=10)
    _to(job, "FAILED", "exit code 3")
    [by_mail] = _pending(mail["id"])
    [by_hook] = _pending(hook["id"])
    assert deliver(str(by_mail.pk)) == "PENDING"  # refused: tried again after a backoff
    assert deliver(str(by_hook.pk)) == "SENT"  # the other channel did not wait
    assert receiver.posts[0]["json"]["text"].startswith("Torus: job train failed")
    by_mail.refresh_from_db()
    assert by_mail.tries == 1 and by_mail.next_try_at > timezone.now()
    assert "ConnectionRefusedError" in by_mail.error
    shown = acme.client(Role.MEMBER).get(reverse("subscription-detail", args=[mail["id"]]))
    assert shown.json()["failing_since"] and "ConnectionRefused" in shown.json()["last_error"]
    scraped = telemetry.render().decode()  # /metrics: the failed try and the delivery, by channel
    assert re.search(r'^torus_notification_failures_total\{channel="email"\} [1-9]', scraped, re.M)
    assert re.search(r'^torus_notification_seconds_count\{channel="slack"\} [1-9]', scraped, re.M)
    settings.TORUS_NOTIFY_RETRY_HOURS = 0  # its retries are over
    Notification.objects.filter(pk=by_mail.pk).update(next_try_at=timezone.now())
    assert deliver(str(by_mail.pk)) == "FAILED"


def test_signed_webhooks_and_the_chat_formats(acme, cluster, receiver):
    job = _job(acme, cluster)
    signed = _subscribe(acme, events=["cancelled"], channel="webhook", address=receiver.url)
    assert len(signed["secret"]) > 20  # shown once
    shown = acme.client(Role.MEMBER).get(reverse("subscription-detail", args=[signed["id"]]))
    assert "secret" not in shown.json()
    for channel in ("feishu", "dingtalk", "wecom"):
        _subscribe(acme, events=["cancelled"], channel=channel, address=receiver.url)
    _to(job, "CANCELLED", "cancelled by request")
    for notification in Notification.objects.filter(state="PENDING"):
        assert deliver(str(notification.pk)) == "SENT"
    [generic] = [p for p in receiver.posts if "items" in p["json"]]
    assert verify(
        secret=signed["secret"],
        timestamp=generic["headers"]["X-Torus-Timestamp"],
        body=generic["raw"],
        signature=generic["headers"]["X-Torus-Signature"],
    )
    assert generic["json"]["items"][0]["event"] == "cancelled"
    assert generic["json"]["items"][0]["reason"] == "cancelled by request"
    [feishu] = [p["json"] for p in receiver.posts if "msg_type" in p["json"]]
    assert feishu["msg_type"] == "text"
    assert feishu["content"]["text"].startswith("Torus: job train was cancelled")
    formats = [p["json"] for p in receiver.posts if "msgtype" in p["json"]]
    assert len(formats) == 2 and all("was cancelled" in f["text"]["content"] for f in formats)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": ["failed"], "channel": "email", "address": "not-an-address"}, "address"),
        ({"events": ["failed"], "channel": "slack", "address": "http://example.org/x"}, "address"),
        ({"events": ["failed"], "channel": "webhook", "address": "https://127.0.0.1/x"}, "address"),
        ({"events": ["exploded"], "channel": "email", "address": "a@example.org"}, "events"),
        ({"events": [], "channel": "email", "address": "a@example.org"}, "events"),
        ({"events": ["failed"], "channel": "pager", "address": "a@example.org"}, "channel"),
        ({"events": ["failed"], "channel": "email", "address": "a@example.org", "x": 1}, "x"),
    ],
)
def test_bad_subscriptions_are_400s_naming_the_field(acme, body, field):
    response = acme.client(Role.MEMBER).post(reverse("subscription-list"), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"], response.json()
    assert not Subscription.objects.exists()


def test_a_job_of_a_project_outside_the_tenant_is_not_found(acme, globex, cluster):
    job = make_job(project=globex.project, user=globex.users[Role.MEMBER], cluster=cluster)
    body = {"events": ["failed"], "channel": "email", "address": "a@example.org"}
    client = acme.client(Role.OWNER)
    for scope in ({"job": str(job.pk)}, {"project": str(globex.project.pk)}):
        response = client.post(reverse("subscription-list"), {**body, **scope}, format="json")
        assert response.status_code == 404, response.content
    missing = client.post(
        reverse("subscription-list"), {**body, "job": str(uuid.uuid4())}, format="json"
    )
    assert missing.status_code == 404
    assert not Subscription.objects.exists()


def test_a_job_waiting_past_its_expected_start_is_told_once(acme, cluster, smtp_server):
    """The estimate pass (apps/jobs/estimates.py) finds the job still waiting past the p90
    first predicted for it: its owner is mailed `waiting_too_long` with why it waits, once."""
    blocker = _job(acme, cluster, name="big")
    blocker.attempts.create(number=1, state="RUNNING", started_at=timezone.now())
    Job.objects.filter(pk=blocker.pk).update(gpus=8)  # the whole (8-GPU) partition
    waiting = _job(acme, cluster, name="small", state="QUEUED")
    sub = _subscribe(acme, events=["waiting_too_long"], channel="email", address="m@example.org")
    now = timezone.now()
    estimates_refresh(cluster_id=cluster.pk, now=now)  # first prediction: p90 ~4 h away
    estimates_refresh(cluster_id=cluster.pk, now=now + timedelta(hours=1))
    assert _pending(sub["id"]) == []  # not yet past its p90
    estimates_refresh(cluster_id=cluster.pk, now=now + timedelta(hours=5))
    [notification] = _pending(sub["id"])
    assert deliver(str(notification.pk)) == "SENT"
    [mail] = smtp_server.messages()
    assert mail["Subject"] == "Torus: job small is waiting longer than expected"
    assert (
        f"Job small ({waiting.pk}) in {acme.project.slug} is waiting longer" in mail.get_payload()
    )
    estimates_refresh(cluster_id=cluster.pk, now=now + timedelta(hours=6))
    assert _pending(sub["id"]) == []  # once
