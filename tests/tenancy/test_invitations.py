"""Membership by invitation: an admin invites by e-mail or username, the person accepts, and only
then are they a member. Nobody outside the tenant is looked up or shown."""

from datetime import timedelta

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from apps.tenancy.models import AuditEvent, Invitation, Membership, Role, hash_token
from tests.conftest import bearer_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def invite(client, **body):
    return client.post(reverse("invitation-list"), {"role": "member", **body}, format="json")


def accept(user, token):
    client = bearer_client(None)
    client.force_authenticate(user=user)
    return client.post(reverse("invitation-accept"), {"token": token}, format="json")


def test_direct_membership_creation_is_gone(acme):
    outsider = UserFactory()
    response = acme.client(Role.OWNER).post(
        reverse("membership-list"), {"user": outsider.username, "role": "member"}, format="json"
    )
    assert response.status_code == 405
    assert not Membership.objects.filter(user=outsider).exists()


def test_invite_by_username_then_accept_makes_a_member_with_the_role(acme):
    person = UserFactory()
    response = invite(acme.client(Role.ADMIN), username=person.username, role="viewer")
    assert response.status_code == 201, response.content
    body = response.json()
    token = body["token"]
    assert token.startswith("tinv_") and body["accept_url"].endswith("/api/v1/invitations/accept/")
    assert body["status"] == "pending" and body["role"] == "viewer"
    invitation = Invitation.objects.get(pk=body["id"])
    assert invitation.token_hash == hash_token(token)  # only the hash is stored
    assert token not in str(Invitation.objects.filter(pk=invitation.pk).values().first())
    assert not Membership.objects.filter(user=person, tenant=acme.tenant).exists()

    # Shown once: never again in the detail or the list.
    detail = acme.client(Role.ADMIN).get(reverse("invitation-detail", kwargs={"pk": body["id"]}))
    assert "token" not in detail.json() and token not in detail.content.decode()
    listing = acme.client(Role.OWNER).get(reverse("invitation-list")).content.decode()
    assert token not in listing and body["id"] in listing

    response = accept(person, token)
    assert response.status_code == 201, response.content
    assert response.json()["tenant_slug"] == "acme" and response.json()["role"] == "viewer"
    membership = Membership.objects.get(user=person, tenant=acme.tenant)
    assert membership.role == Role.VIEWER
    invitation.refresh_from_db()
    assert invitation.accepted_by == person and invitation.status() == "accepted"
    actions = set(
        AuditEvent.objects.filter(tenant=acme.tenant, target_id=str(invitation.pk)).values_list(
            "action", flat=True
        )
    )
    assert actions == {"invitation.create", "invitation.accept"}
    created = AuditEvent.objects.get(tenant=acme.tenant, action="membership.create")
    assert created.actor == person and created.changes["role"] == [None, "viewer"]


def test_invite_by_email_binds_to_the_user_with_that_email_and_mails_the_link(
    acme, django_capture_on_commit_callbacks
):
    person = UserFactory(email="Grace.Hopper@Example.org")
    impostor = UserFactory(email="someone-else@example.org")
    with django_capture_on_commit_callbacks(execute=True):
        response = invite(acme.client(Role.ADMIN), email="grace.hopper@example.org")
    assert response.status_code == 201, response.content
    token = response.json()["token"]
    # Django's e-mail backend produced one message, to the invited address, with the token.
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["grace.hopper@example.org"]
    assert token in message.body and "Acme" in message.subject

    refused = accept(impostor, token)
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "This invitation is for someone else."
    assert not Membership.objects.filter(user=impostor, tenant=acme.tenant).exists()

    assert accept(person, token).status_code == 201  # e-mail matched without regard to case
    assert Membership.objects.get(user=person, tenant=acme.tenant).role == Role.MEMBER


def test_invitation_by_username_binds_to_that_user_only(acme):
    person, other = UserFactory(), UserFactory()
    token = invite(acme.client(Role.ADMIN), username=person.username).json()["token"]
    assert accept(other, token).status_code == 403
    assert not Membership.objects.filter(user=other, tenant=acme.tenant).exists()
    assert accept(person, token).status_code == 201


def test_a_token_is_single_use(acme):
    person = UserFactory()
    token = invite(acme.client(Role.ADMIN), username=person.username).json()["token"]
    assert accept(person, token).status_code == 201
    Membership.objects.filter(user=person, tenant=acme.tenant).delete()
    response = accept(person, token)
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "token": ["This invitation has already been used."]
    }
    assert not Membership.objects.filter(user=person, tenant=acme.tenant).exists()


def test_expired_and_unknown_tokens_are_refused(acme):
    person = UserFactory()
    body = invite(acme.client(Role.ADMIN), username=person.username).json()
    Invitation.objects.filter(pk=body["id"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    response = accept(person, body["token"])
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["token"] == ["This invitation has expired."]
    response = accept(person, "tinv_made-up")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["token"] == ["Unknown invitation token."]
    assert not Membership.objects.filter(user=person, tenant=acme.tenant).exists()


def test_expiry_follows_the_setting(acme, settings):
    settings.TORUS_INVITATION_SECONDS = 3600
    body = invite(acme.client(Role.ADMIN), email="new@example.org").json()
    expires = Invitation.objects.get(pk=body["id"]).expires_at - timezone.now()
    assert timedelta(minutes=59) < expires <= timedelta(hours=1)


def test_revoked_invitation_is_refused_and_revocation_is_audited(acme):
    person = UserFactory()
    body = invite(acme.client(Role.ADMIN), username=person.username).json()
    url = reverse("invitation-detail", kwargs={"pk": body["id"]})
    assert acme.client(Role.MEMBER).delete(url).status_code == 403
    assert acme.client(Role.ADMIN).delete(url).status_code == 204
    assert acme.client(Role.ADMIN).get(url).json()["status"] == "revoked"  # stays listed
    response = accept(person, body["token"])
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["token"] == ["This invitation was revoked."]
    assert AuditEvent.objects.filter(
        tenant=acme.tenant, action="invitation.revoke", target_id=body["id"]
    ).exists()
    assert not Membership.objects.filter(user=person, tenant=acme.tenant).exists()


def test_the_answer_is_the_same_whether_the_person_exists_or_not(acme, globex):
    """Same status and body shape; nothing about the person (another tenant's or nobody)."""
    admin = acme.client(Role.ADMIN)
    outsider = globex.users[Role.MEMBER]  # exists, with an e-mail and a name
    outsider.first_name, outsider.last_name = "Olga", "Outsider"
    outsider.save()
    answers = [
        invite(admin, username=outsider.username),
        invite(admin, username="nobody-by-this-name"),
        invite(admin, email=outsider.email),
        invite(admin, email="nobody@nowhere.example"),
    ]
    assert [a.status_code for a in answers] == [201, 201, 201, 201]
    shapes = {tuple(sorted(a.json())) for a in answers}
    assert len(shapes) == 1
    for answer in answers:
        text = answer.content.decode()
        assert "Olga" not in text and "Outsider" not in text
        assert answer.json()["invited_by"] == "acme-admin"
    assert "globex" not in answers[0].content.decode().replace(outsider.username, "")
    assert outsider.email not in answers[0].content.decode()


def test_other_tenants_never_see_or_touch_invitations(acme, globex):
    body = invite(acme.client(Role.ADMIN), email="secret-hire@example.org").json()
    intruder = globex.client(Role.OWNER)
    url = reverse("invitation-detail", kwargs={"pk": body["id"]})
    assert intruder.get(url).status_code == 404
    assert intruder.delete(url).status_code == 404
    assert "secret-hire" not in intruder.get(reverse("invitation-list")).content.decode()
    assert Invitation.objects.get(pk=body["id"]).status() == "pending"


def test_only_owners_invite_owners(acme):
    person = UserFactory()
    response = invite(acme.client(Role.ADMIN), username=person.username, role="owner")
    assert response.status_code == 403
    response = invite(acme.client(Role.OWNER), username=person.username, role="owner")
    assert response.status_code == 201
    assert accept(person, response.json()["token"]).status_code == 201
    assert Membership.objects.get(user=person, tenant=acme.tenant).role == Role.OWNER


def test_bad_input_names_the_field(acme):
    admin = acme.client(Role.ADMIN)
    cases = [
        ({}, "email"),
        ({"email": "a@example.org", "username": "a"}, "username"),
        ({"email": "not-an-address"}, "email"),
        ({"username": "x", "role": "emperor"}, "role"),
        ({"username": "x", "colour": "red"}, "colour"),
    ]
    for body, field in cases:
        response = admin.post(reverse("invitation-list"), {"role": "member", **body}, format="json")
        assert response.status_code == 400, body
        assert field in response.json()["error"]["fields"], (body, response.json())
    response = accept(acme.users[Role.VIEWER], "")
    assert response.status_code == 400 and "token" in response.json()["error"]["fields"]
    assert Invitation.objects.count() == 0


def test_members_and_pending_invitations_are_conflicts(acme):
    admin = acme.client(Role.ADMIN)
    response = invite(admin, username="acme-viewer")
    assert response.status_code == 409
    assert invite(admin, email="twice@example.org").status_code == 201
    assert invite(admin, email="TWICE@example.org").status_code == 409


def test_accept_needs_a_signed_in_person_not_a_read_only_token(acme):
    from apps.tenancy.services import token_create

    person = UserFactory()
    token = invite(acme.client(Role.ADMIN), username=person.username).json()["token"]
    anonymous = bearer_client(None).post(reverse("invitation-accept"), {"token": token})
    assert anonymous.status_code == 401
    # A read-only token of the person's own other tenant may not write.
    other = Membership.objects.create(tenant=acme.tenant, user=UserFactory(), role=Role.VIEWER)
    _, read_only = token_create(
        actor=None, user=other.user, tenant=acme.tenant, name="ro", read_only=True
    )
    assert (
        bearer_client(read_only).post(reverse("invitation-accept"), {"token": token}).status_code
        == 403
    )
    assert Invitation.objects.get(token_hash=hash_token(token)).status() == "pending"


def test_admins_see_members_contact_details_others_only_usernames(acme):
    viewer = acme.users[Role.VIEWER]
    url = reverse("membership-list")
    for role, sees_email in [
        (Role.OWNER, True),
        (Role.ADMIN, True),
        (Role.MEMBER, False),
        (Role.VIEWER, False),
    ]:
        rows = acme.client(role).get(url).json()["results"]
        row = next(r for r in rows if r["user_detail"]["username"] == viewer.username)
        assert ("email" in row["user_detail"]) is (sees_email or role == Role.VIEWER), role
        others = [r for r in rows if r["user_detail"]["username"] != acme.users[role].username]
        for other in others:
            assert ("email" in other["user_detail"]) is sees_email, (role, other)
            assert other["role"] in Role.values
    project_members = acme.client(Role.VIEWER).get(reverse("project-member-list")).json()
    assert all("email" not in r["user_detail"] for r in project_members["results"])
    project_members = acme.client(Role.ADMIN).get(reverse("project-member-list")).json()
    assert all("email" in r["user_detail"] for r in project_members["results"])


def test_project_member_add_does_not_tell_strangers_from_nobody(acme, globex):
    admin = acme.client(Role.ADMIN)
    answers = [
        admin.post(
            reverse("project-member-list"),
            {"project": str(acme.project.pk), "user": name},
            format="json",
        )
        for name in (globex.users[Role.MEMBER].username, "no-such-user")
    ]
    assert [a.status_code for a in answers] == [400, 400]
    messages = [a.json()["error"]["fields"]["user"][0] for a in answers]
    assert messages == [
        f"{globex.users[Role.MEMBER].username!r} is not a member of this tenant.",
        "'no-such-user' is not a member of this tenant.",
    ]
