"""The audit log: every create, update and delete recorded with actor, target and change."""

import pytest
from django.urls import reverse

from apps.tenancy.models import AuditEvent, Role

pytestmark = pytest.mark.django_db


def test_project_lifecycle_is_audited_with_changes(acme):
    client = acme.client(Role.ADMIN)
    created = client.post(reverse("project-list"), {"name": "Speech", "slug": "speech"}).json()
    url = reverse("project-detail", kwargs={"pk": created["id"]})
    assert client.patch(url, {"name": "Speech v2"}).status_code == 200
    assert client.delete(url).status_code == 204
    events = AuditEvent.objects.filter(target_id=created["id"]).order_by("created_at")
    assert [e.action for e in events] == ["project.create", "project.update", "project.delete"]
    assert all(e.actor == acme.users[Role.ADMIN] and e.token is not None for e in events)
    assert events[1].changes == {"name": ["Speech", "Speech v2"]}
    assert events[0].changes["slug"] == [None, "speech"]


def test_membership_changes_are_audited(acme):
    client = acme.client(Role.OWNER)
    m = acme.tenant.memberships.get(user=acme.users[Role.VIEWER])
    client.patch(reverse("membership-detail", kwargs={"pk": m.pk}), {"role": "member"})
    event = AuditEvent.objects.get(action="membership.update", target_id=str(m.pk))
    assert event.changes == {"role": ["viewer", "member"]}


def test_token_creation_is_audited(acme):
    response = acme.client(Role.MEMBER).post(reverse("token-list"), {"name": "ci"})
    event = AuditEvent.objects.get(action="token.create", target_id=response.json()["id"])
    assert event.actor == acme.users[Role.MEMBER]
    assert response.json()["token"] not in str(event.changes)


def test_admins_read_the_audit_log_filtered_and_nobody_edits_it(acme, globex):
    acme.client(Role.ADMIN).post(reverse("project-list"), {"name": "Q", "slug": "q"})
    globex.client(Role.ADMIN).post(reverse("project-list"), {"name": "Q", "slug": "q"})
    client = acme.client(Role.ADMIN)
    rows = client.get(reverse("audit-event-list"), {"action": "project.create"}).json()["results"]
    assert len(rows) == 1 and rows[0]["tenant_id"] == str(acme.tenant.id)
    url = reverse("audit-event-detail", kwargs={"pk": rows[0]["id"]})
    for method in ("put", "patch", "delete"):
        assert getattr(client, method)(url, {}).status_code == 405
    event = AuditEvent.objects.get(pk=rows[0]["id"])
    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        AuditEvent.objects.filter(pk=event.pk).update(action="forged")
    with pytest.raises(TypeError):
        AuditEvent.objects.filter(pk=event.pk).delete()


def test_audit_list_paginates_with_a_cursor_and_orders(acme):
    client = acme.client(Role.ADMIN)
    for i in range(5):
        client.post(reverse("project-list"), {"name": f"P{i}", "slug": f"p{i}"})
    page = client.get(
        reverse("audit-event-list"), {"page_size": 2, "action": "project.create"}
    ).json()
    assert len(page["results"]) == 2 and page["next"]
    seen = [r["target_repr"] for r in page["results"]]
    while page["next"]:
        page = client.get(page["next"]).json()
        seen += [r["target_repr"] for r in page["results"]]
    assert seen == [f"acme/p{i}" for i in reversed(range(5))]
    oldest_first = client.get(
        reverse("audit-event-list"), {"action": "project.create", "ordering": "created_at"}
    ).json()["results"]
    assert [r["target_repr"] for r in oldest_first] == [f"acme/p{i}" for i in range(5)]
