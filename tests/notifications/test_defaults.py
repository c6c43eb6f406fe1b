"""A tenant admin's notification defaults: every member reads them, only admins set them; a
member with no subscription of their own is told by them (their account's e-mail, through a
real SMTP server, and the bell); a member with their own is not; a default removed takes the
subscriptions made from it along."""

import pytest
from django.urls import reverse

from apps.notifications.models import Notification, Subscription
from apps.notifications.tasks import deliver
from apps.tenancy.models import Role
from tests.notifications.test_notifications import _job, _to

pytestmark = pytest.mark.django_db(transaction=True)
URL = reverse("notification-default-list")


def test_the_tenants_defaults_tell_members_without_their_own(acme, cluster, smtp_server):
    admin, member = acme.client(Role.ADMIN), acme.client(Role.MEMBER)
    assert (
        member.post(URL, {"channel": "email", "events": ["failed"]}, format="json").status_code
        == 403
    )
    for body, field in [
        ({"channel": "slack", "events": ["failed"]}, "channel"),
        ({"channel": "email", "events": ["exploded"]}, "events"),
        ({"channel": "email", "events": []}, "events"),
    ]:
        bad = admin.post(URL, body, format="json")
        assert bad.status_code == 400 and field in bad.json()["error"]["fields"], bad.content
    email = admin.post(URL, {"channel": "email", "events": ["failed"]}, format="json")
    assert email.status_code == 201, email.content
    again = admin.post(URL, {"channel": "inapp", "events": ["succeeded"]}, format="json")
    bell = admin.post(URL, {"channel": "inapp", "events": ["failed", "succeeded"]}, format="json")
    assert again.json()["id"] == bell.json()["id"] and bell.json()["events"] == [
        "failed",
        "succeeded",
    ]
    assert {r["channel"] for r in member.get(URL).json()["results"]} == {"email", "inapp"}

    # the admin has a subscription of their own: the defaults are not theirs
    own = admin.post(
        reverse("subscription-list"), {"events": ["succeeded"], "channel": "inapp"}, format="json"
    )
    assert own.status_code == 201
    theirs = _job(acme, cluster, name="admins", user_role=Role.ADMIN)
    mine = _job(acme, cluster, name="members")
    _to(theirs, "FAILED", "exit code 1")
    _to(mine, "FAILED", "exit code 2")

    made = Subscription.objects.exclude(default=None)
    assert sorted((s.user.username, s.channel) for s in made) == [
        ("acme-member", "email"), ("acme-member", "inapp"),
    ]  # fmt: skip
    listed = member.get(reverse("subscription-list")).json()["results"]
    assert all(row["default"] for row in listed) and len(listed) == 2
    told = Notification.objects.filter(subscription__in=made)
    assert {n.items[0]["name"] for n in told} == {"members"} and told.count() == 2
    assert not Notification.objects.filter(subscription__user=acme.users[Role.ADMIN]).exists()
    for notification in told:
        assert deliver(str(notification.pk)) == "SENT"
    [mail] = smtp_server.messages()
    assert mail["To"] == "acme-member@example.org"
    assert mail["Subject"] == "Torus: job members failed"

    # removed, the default takes its subscriptions along
    assert (
        admin.delete(reverse("notification-default-detail", args=[email.json()["id"]])).status_code
        == 204
    )
    assert list(Subscription.objects.exclude(default=None).values_list("channel", flat=True)) == [
        "inapp"
    ]
