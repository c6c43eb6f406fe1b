"""The Django admin for operators: every model's pages render; the audit log is read-only."""

import pytest
from django.contrib import admin
from django.urls import reverse

from apps.tenancy.models import AuditEvent
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client):
    user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


def test_every_registered_model_has_a_working_changelist_with_search(operator, acme, cluster):
    from tests.factories import make_job

    make_job(project=acme.project, user=acme.users["member"], cluster=cluster)
    for model in admin.site._registry:
        label = model._meta.app_label
        if label not in ("tenancy", "compute", "jobs", "quotas"):
            continue
        url = reverse(f"admin:{label}_{model._meta.model_name}_changelist")
        response = operator.get(url, {"q": "acme"})
        assert response.status_code == 200, url


def test_audit_events_cannot_be_added_changed_or_deleted(operator, acme):
    event = AuditEvent.objects.filter(tenant=acme.tenant).first()
    assert operator.get(reverse("admin:tenancy_auditevent_add")).status_code == 403
    change = reverse("admin:tenancy_auditevent_change", args=[event.pk])
    assert operator.get(change).status_code == 200  # viewable
    assert operator.post(change, {"action": "forged"}).status_code == 403
    delete = reverse("admin:tenancy_auditevent_delete", args=[event.pk])
    assert operator.post(delete, {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.get(pk=event.pk).action == event.action
