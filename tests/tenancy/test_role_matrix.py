"""The role matrix (apps/tenancy/policies.py, docs/access.md), tested cell by cell over the API."""

import pytest
from django.urls import reverse

from apps.quotas.models import Quota
from apps.tenancy.models import ROLE_RANK, AccessToken, Membership, ProjectMember, Role
from apps.tenancy.policies import MATRIX
from apps.tenancy.services import token_create
from tests.conftest import ROLES, bearer_client
from tests.factories import MembershipFactory, UserFactory, make_job


def _request(world, role, resource, action, cluster=None):
    """Perform (resource, action) in the acme tenant as `role`; return the response."""
    client = world.client(role)
    tenant, project = world.tenant, world.project
    viewer_membership = Membership.objects.get(tenant=tenant, user=world.users[Role.VIEWER])
    own_token = AccessToken.objects.get(tenant=tenant, user=world.users[role])
    newcomer = MembershipFactory(tenant=tenant, role=Role.VIEWER).user
    stranger = UserFactory()
    url = {
        "tenant": reverse("tenant-detail", kwargs={"pk": tenant.pk}),
        "membership": reverse("membership-detail", kwargs={"pk": viewer_membership.pk}),
        "project": reverse("project-detail", kwargs={"pk": project.pk}),
        "project-member": reverse(
            "project-member-detail", kwargs={"pk": ProjectMember.objects.get(project=project).pk}
        ),
        "token": reverse("token-detail", kwargs={"pk": own_token.pk}),
    }.get(resource)
    if resource in ("job", "quota"):
        return _request_jobs(world, role, resource, action, cluster)
    if resource == "usage":
        return client.get(reverse("usage"))
    if resource == "logs":
        return client.get(reverse("logs-search"), {"q": "anything"})
    if resource == "failure-signature":
        from apps.logs.models import FailureSignature

        sig = FailureSignature.objects.create(tenant=tenant, name="oom", query="out of memory")
        url = reverse("failure-signature-detail", kwargs={"pk": sig.pk})
        return {
            "read": lambda: client.get(url),
            "create": lambda: client.post(
                reverse("failure-signature-list"), {"name": "nccl", "query": "NCCL error"}
            ),
            "update": lambda: client.patch(url, {"query": "CUDA out of memory"}),
            "delete": lambda: client.delete(url),
        }[action]()
    match (resource, action):
        case (_, "read") if resource != "audit-event":
            return client.get(url)
        case ("audit-event", "read"):
            return client.get(reverse("audit-event-list"))
        case ("tenant", "update"):
            return client.patch(url, {"description": "new"}, format="json")
        case ("membership", "create"):
            return client.post(
                reverse("membership-list"), {"user": stranger.username, "role": "member"}
            )
        case ("membership", "update"):
            return client.patch(url, {"role": "member"})
        case ("project", "create"):
            return client.post(reverse("project-list"), {"name": "New", "slug": "new-one"})
        case ("project", "update"):
            return client.patch(url, {"name": "Renamed"})
        case ("project-member", "create"):
            return client.post(
                reverse("project-member-list"),
                {"project": str(project.pk), "user": newcomer.username},
            )
        case ("token", "create"):
            return client.post(reverse("token-list"), {"name": "ci"})
        case ("token", "manage-others"):
            other = world.users[Role.MEMBER if role != Role.MEMBER else Role.VIEWER]
            token, _ = token_create(actor=None, user=other, tenant=tenant, name="theirs")
            return client.delete(reverse("token-detail", kwargs={"pk": token.pk}))
        case (_, "delete"):
            return client.delete(url)
    raise AssertionError(f"no request for {resource}/{action}")


def _request_jobs(world, role, resource, action, cluster):
    client = world.client(role)
    user = world.users[role]
    if resource == "quota":
        quota = Quota.objects.create(tenant=world.tenant, project=world.project, gpus=8)
        url = reverse("quota-detail", kwargs={"pk": quota.pk})
        return {
            "read": lambda: client.get(url),
            "create": lambda: client.post(reverse("quota-list"), {"gpus": 4}),
            "update": lambda: client.patch(url, {"gpus": 16}),
            "delete": lambda: client.delete(url),
        }[action]()
    if action == "create":
        body = {"project": str(world.project.pk), "name": "hello", "command": ["true"]}
        return client.post(reverse("job-list"), body)
    state = "FAILED" if action == "restart" else "PENDING"
    job = make_job(project=world.project, user=user, state=state, cluster=cluster)
    if action == "read":
        return client.get(reverse("job-detail", kwargs={"pk": job.pk}))
    return client.post(reverse(f"job-{action}", kwargs={"pk": job.pk}))


CELLS = [(resource, action, role) for (resource, action) in MATRIX for role in ROLES]


@pytest.mark.django_db
@pytest.mark.parametrize(("resource", "action", "role"), CELLS)
def test_role_matrix_cell(acme, cluster, resource, action, role):
    expected = ROLE_RANK[role] >= ROLE_RANK[MATRIX[(resource, action)]]
    response = _request(acme, role, resource, action, cluster)
    if expected:
        assert response.status_code in (200, 201, 204), response.content
    elif (resource, action) == ("token", "manage-others"):
        assert response.status_code == 404  # others' tokens are invisible below admin
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "permission_denied"


def test_matrix_covers_every_resource_and_verb():
    resources = {resource for resource, _ in MATRIX}
    assert resources == {
        "tenant",
        "membership",
        "project",
        "project-member",
        "token",
        "audit-event",
        "job",
        "quota",
        "usage",
        "logs",
        "failure-signature",
    }


@pytest.mark.django_db
@pytest.mark.parametrize("role", ROLES)
def test_read_only_token_cannot_write_even_as_owner(acme, role):
    _, plaintext = token_create(
        actor=None, user=acme.users[role], tenant=acme.tenant, name="ro", read_only=True
    )
    client = bearer_client(plaintext)
    assert client.get(reverse("project-list")).status_code == 200
    response = client.post(reverse("project-list"), {"name": "X", "slug": "x"})
    assert response.status_code == 403
    assert "read-only" in response.json()["error"]["message"]
    response = client.post(reverse("token-list"), {"name": "escalate"})
    assert response.status_code == 403


@pytest.mark.django_db
def test_only_owners_grant_owner_and_last_owner_stays(acme):
    admin = acme.client(Role.ADMIN)
    viewer_m = Membership.objects.get(tenant=acme.tenant, user=acme.users[Role.VIEWER])
    url = reverse("membership-detail", kwargs={"pk": viewer_m.pk})
    assert admin.patch(url, {"role": "owner"}).status_code == 403
    owner = acme.client(Role.OWNER)
    assert owner.patch(url, {"role": "owner"}).status_code == 200
    # Two owners now: one may step down, the last may not.
    own = Membership.objects.get(tenant=acme.tenant, user=acme.users[Role.OWNER])
    assert (
        owner.patch(
            reverse("membership-detail", kwargs={"pk": own.pk}), {"role": "admin"}
        ).status_code
        == 200
    )
    last = bearer_client(None)
    last.force_authenticate(user=acme.users[Role.VIEWER])
    response = last.delete(url)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"
