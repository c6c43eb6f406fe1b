"""The role matrix (apps/tenancy/policies.py, docs/access.md), tested cell by cell over the API."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.jobs.attempts import attempt_open
from apps.quotas.models import Quota
from apps.tenancy.models import (
    ROLE_RANK,
    AccessToken,
    Invitation,
    Membership,
    ProjectMember,
    Role,
    hash_token,
)
from apps.tenancy.policies import MATRIX
from apps.tenancy.services import token_create
from tests.conftest import ROLES, bearer_client
from tests.factories import MembershipFactory, make_job


def _request(world, role, resource, action, cluster=None):
    """Perform (resource, action) in the acme tenant as `role`; return the response."""
    client = world.client(role)
    tenant, project = world.tenant, world.project
    viewer_membership = Membership.objects.get(tenant=tenant, user=world.users[Role.VIEWER])
    own_token = AccessToken.objects.get(tenant=tenant, user=world.users[role])
    newcomer = MembershipFactory(tenant=tenant, role=Role.VIEWER).user
    invitation = Invitation.objects.create(
        tenant=tenant,
        email=f"{role}-invitee@example.org",
        role=Role.MEMBER,
        token_hash=hash_token(f"tinv_{role}"),
        expires_at=timezone.now() + timedelta(days=1),
    )
    url = {
        "tenant": reverse("tenant-detail", kwargs={"pk": tenant.pk}),
        "membership": reverse("membership-detail", kwargs={"pk": viewer_membership.pk}),
        "project": reverse("project-detail", kwargs={"pk": project.pk}),
        "project-member": reverse(
            "project-member-detail", kwargs={"pk": ProjectMember.objects.get(project=project).pk}
        ),
        "token": reverse("token-detail", kwargs={"pk": own_token.pk}),
        "invitation": reverse("invitation-detail", kwargs={"pk": invitation.pk}),
    }.get(resource)
    if action in ("archive", "restore"):
        return _request_lifecycle(world, role, resource, action)
    if resource in ("job", "quota"):
        return _request_jobs(world, role, resource, action, cluster)
    if resource in ("model", "webhook", "lineage"):
        from tests.registry.matrix import request_registry

        return request_registry(world, role, resource, action)
    if resource == "deployment":
        from tests.serving.matrix import request_serving

        return request_serving(world, role, resource, action)
    if resource == "secret":
        from tests.secrets.matrix import request_secrets

        return request_secrets(world, role, resource, action)
    if resource == "dataset":
        from tests.datasets.matrix import request_datasets

        return request_datasets(world, role, resource, action)
    if resource == "usage":
        return client.get(reverse({"read": "usage", "export": "usage-export"}[action]))
    if resource == "logs":
        if action == "search":
            return client.get(reverse("logs-search"), {"q": "anything"})
        job = make_job(project=project, user=world.users[role], cluster=cluster)
        attempt = attempt_open(job=job)
        return client.get(reverse("logs-context"), {"id": f"{attempt.pk}:stdout:0"})
    if resource == "subscription":
        return _request_subscription(world, role, action)
    if resource == "notification_default":
        return _request_notification_default(world, role, action)
    if resource == "failure-signature":
        from apps.logs.models import FailureSignature

        sig = FailureSignature.objects.create(tenant=tenant, name="oom", query="out of memory")
        url = reverse("failure-signature-detail", kwargs={"pk": sig.pk})
        return {
            "read": lambda: client.get(url),
            "stats": lambda: client.get(reverse("failure-signature-stats")),
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
        case ("invitation", "create"):
            return client.post(
                reverse("invitation-list"), {"email": "someone@example.org", "role": "member"}
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


def _request_subscription(world, role, action):
    """Everyone's own notification subscriptions: read, create, delete."""
    from apps.notifications.models import Subscription

    client = world.client(role)
    body = {"events": ["failed"], "channel": "email", "address": f"{role}@example.org"}
    if action == "create":
        return client.post(reverse("subscription-list"), body, format="json")
    own = Subscription.objects.create(
        tenant=world.tenant, user=world.users[role], **{**body, "events": ["failed"]}
    )
    url = reverse("subscription-detail", kwargs={"pk": own.pk})
    return client.get(url) if action == "read" else client.delete(url)


def _request_notification_default(world, role, action):
    """The tenant's notification defaults: every member reads, admins set and remove."""
    from apps.notifications.models import NotificationDefault

    client = world.client(role)
    if action == "create":
        body = {"channel": "email", "events": ["failed"]}
        return client.post(reverse("notification-default-list"), body, format="json")
    row, _ = NotificationDefault.objects.get_or_create(
        tenant=world.tenant, channel="inapp", defaults={"events": ["failed"]}
    )
    url = reverse("notification-default-detail", kwargs={"pk": row.pk})
    return client.get(url) if action == "read" else client.delete(url)


def _request_lifecycle(world, role, resource, action):
    """Archive (typing the name) or restore (an archived one) a project, dataset, model or
    deployment of the world's project."""
    from apps.datasets.models import Dataset
    from apps.registry.models import RegisteredModel
    from apps.tenancy import lifecycle
    from tests.serving.test_gateway import make_deployment

    owner = world.users[Role.OWNER]
    thing = {
        "project": lambda: world.project,
        "dataset": lambda: Dataset.objects.create(
            tenant=world.tenant, project=world.project, name="d", created_by=owner
        ),
        "model": lambda: RegisteredModel.objects.create(
            tenant=world.tenant, project=world.project, name="m", created_by=owner
        ),
        "deployment": lambda: make_deployment(world),
    }[resource]()
    client = world.client(role)
    if action == "restore":
        lifecycle.archive(actor=None, thing=thing, confirm=lifecycle.confirm_name(thing))
        return client.post(reverse(f"{resource}-restore", kwargs={"pk": thing.pk}))
    body = {"confirm": lifecycle.confirm_name(thing)}
    return client.post(reverse(f"{resource}-archive", kwargs={"pk": thing.pk}), body)


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
    if action in ("logs", "metrics"):
        return client.get(reverse(f"job-output-{action}", kwargs={"pk": job.pk}))  # logs' viewset
    return client.post(reverse(f"job-{action}", kwargs={"pk": job.pk}))


CELLS = [(resource, action, role) for (resource, action) in MATRIX for role in ROLES]


@pytest.mark.django_db
@pytest.mark.parametrize(("resource", "action", "role"), CELLS)
def test_role_matrix_cell(acme, cluster, resource, action, role):
    expected = ROLE_RANK[role] >= ROLE_RANK[MATRIX[(resource, action)]]
    response = _request(acme, role, resource, action, cluster)
    if expected and (resource, action) == ("logs", "context"):
        assert response.status_code == 404, response.content  # allowed; that line isn't shipped
    elif expected:
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
        "invitation",
        "project",
        "project-member",
        "token",
        "audit-event",
        "job",
        "quota",
        "usage",
        "logs",
        "failure-signature",
        "dataset",
        "model",
        "lineage",
        "webhook",
        "deployment",
        "secret",
        "subscription",
        "notification_default",
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


# -- custom actions and the rules finer than a role (apps/tenancy/policies.py RULES) ----------


@pytest.mark.django_db
@pytest.mark.parametrize("role", ROLES)
def test_batch_submit_follows_job_create(acme, cluster, role):
    body = {"jobs": [{"project": str(acme.project.pk), "name": "s", "command": ["true"]}] * 2}
    response = acme.client(role).post(reverse("job-batch"), body, format="json")
    if ROLE_RANK[role] >= ROLE_RANK[MATRIX[("job", "create")]]:
        assert response.status_code == 201, response.content
    else:
        assert response.status_code == 403, response.content


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["cancel", "restart"])
@pytest.mark.parametrize("role", ROLES)
def test_cancel_and_restart_someone_elses_job_take_an_admin(acme, cluster, role, action):
    """A member cancels and restarts only their own jobs; admins and owners anyone's."""
    owner_of_job = acme.users[Role.MEMBER if role != Role.MEMBER else Role.ADMIN]
    state = "FAILED" if action == "restart" else "PENDING"
    job = make_job(project=acme.project, user=owner_of_job, state=state, cluster=cluster)
    response = acme.client(role).post(reverse(f"job-{action}", kwargs={"pk": job.pk}))
    if ROLE_RANK[role] >= ROLE_RANK[Role.ADMIN]:
        assert response.status_code == 200, response.content
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "permission_denied"


@pytest.mark.django_db
def test_a_member_submits_only_in_their_projects(acme, cluster):
    from tests.factories import ProjectFactory

    elsewhere = ProjectFactory(tenant=acme.tenant)
    body = {"project": str(elsewhere.pk), "name": "x", "command": ["true"]}
    response = acme.client(Role.MEMBER).post(reverse("job-list"), body, format="json")
    assert response.status_code == 403
    assert "member of project" in response.json()["error"]["message"]
    batch = {"jobs": [body, {**body, "project": str(acme.project.pk)}]}
    response = acme.client(Role.MEMBER).post(reverse("job-batch"), batch, format="json")
    assert response.status_code == 403
    assert acme.client(Role.ADMIN).post(reverse("job-list"), body, format="json").status_code == 201


@pytest.mark.django_db
def test_the_service_boundary_applies_the_same_rules_without_the_api(acme, cluster):
    """Callers outside the API (tasks, commands) get the same answer from the jobs services."""
    from django.core.exceptions import PermissionDenied

    from apps.jobs import services
    from apps.tenancy.access import actor_for_user

    job = make_job(project=acme.project, user=acme.users[Role.ADMIN], cluster=cluster)
    member = actor_for_user(user=acme.users[Role.MEMBER])
    with pytest.raises(PermissionDenied):
        services.job_cancel(actor=member, job=job)
    viewer = actor_for_user(user=acme.users[Role.VIEWER])
    with pytest.raises(PermissionDenied):
        services.job_submit(
            actor=viewer, project=acme.project, spec={"name": "x", "command": ["true"]}
        )
    admin = actor_for_user(user=acme.users[Role.ADMIN])
    assert services.job_cancel(actor=admin, job=job).state == "CANCELLED"


@pytest.mark.django_db
def test_read_only_token_may_use_every_read_action_and_no_write_action(acme, cluster):
    job = make_job(
        project=acme.project, user=acme.users[Role.OWNER], state="FAILED", cluster=cluster
    )
    _, plaintext = token_create(
        actor=None, user=acme.users[Role.OWNER], tenant=acme.tenant, name="ro", read_only=True
    )
    client = bearer_client(plaintext)
    for url in (
        reverse("job-output-logs", kwargs={"pk": job.pk}),
        reverse("job-output-metrics", kwargs={"pk": job.pk}),
        reverse("failure-signature-stats"),
        reverse("usage-export"),
    ):
        assert client.get(url).status_code == 200, url
    for url in (
        reverse("job-restart", kwargs={"pk": job.pk}),
        reverse("job-cancel", kwargs={"pk": job.pk}),
    ):
        response = client.post(url)
        assert response.status_code == 403, url
        assert "read-only" in response.json()["error"]["message"]
    body = {"jobs": [{"project": str(acme.project.pk), "name": "s", "command": ["true"]}]}
    assert client.post(reverse("job-batch"), body, format="json").status_code == 403


def test_every_api_action_is_in_the_matrix():
    """Each route's view declares a resource, and each of its actions maps to a matrix cell (or
    to SIGNED_IN): nothing is left to a view's own check."""
    from django.urls import URLPattern, URLResolver, get_resolver

    from apps.tenancy.api.permissions import CRUD_ACTIONS, MatrixPermission
    from apps.tenancy.policies import SIGNED_IN

    def walk(patterns, prefix=""):
        for entry in patterns:
            if isinstance(entry, URLResolver):
                yield from walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern) and (prefix + str(entry.pattern)).startswith(
                "api/v1/"
            ):
                yield entry

    checked = set()
    for entry in walk(get_resolver().url_patterns):
        view = entry.callback
        cls = getattr(view, "cls", None) or getattr(view, "view_class", None)
        if cls is None or not any(issubclass(p, MatrixPermission) for p in cls.permission_classes):
            from rest_framework.permissions import IsAdminUser

            staff_only = cls is not None and IsAdminUser in cls.permission_classes  # operators'
            assert entry.name in ("auth-login", "auth-csrf") or staff_only, entry.name  # open
            continue
        actions = getattr(view, "actions", None) or {"get": None}
        initkwargs = getattr(view, "initkwargs", {})
        for method, name in actions.items():
            declared = initkwargs.get("policy_action") or getattr(cls, "policy_action", None)
            if isinstance(declared, dict):
                declared = declared.get(method)
            action = declared or CRUD_ACTIONS.get(name)
            assert action, f"{entry.name} {method}: no matrix action"
            assert cls.resource, entry.name
            assert (cls.resource, action) in MATRIX or (cls.resource, action) in SIGNED_IN, (
                entry.name,
                cls.resource,
                action,
            )
            checked.add((cls.resource, action))
    custom = {("job", "cancel"), ("job", "restart"), ("job", "logs"), ("job", "metrics")}
    custom |= {("usage", "export"), ("logs", "search"), ("logs", "context")}
    assert custom | {("failure-signature", "stats")} <= checked
