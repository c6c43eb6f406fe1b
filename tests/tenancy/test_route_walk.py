"""Walk every /api/v1 route the URL resolver knows: another tenant gets 404, anonymous gets 401,
and neither changes anything."""

import re
from datetime import timedelta

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from apps.compute.models import AcceleratorType
from apps.datasets.models import Dataset, DatasetVersion
from apps.jobs.models import Job, JobEvent
from apps.logs.models import FailureSignature
from apps.notifications.models import NotificationDefault, Subscription
from apps.quotas.models import Quota
from apps.registry.models import ModelVersion, RegisteredModel, Webhook
from apps.secrets import crypto
from apps.secrets.models import ProjectSecret
from apps.serving.models import Deployment
from apps.tenancy.models import (
    AccessToken,
    AuditEvent,
    Invitation,
    Membership,
    ProjectMember,
    Role,
    hash_token,
)
from tests.conftest import bearer_client
from tests.factories import make_job

PUBLIC_ROUTES = {"auth-login", "auth-csrf"}  # sign-in is open by design (CSRF-protected)
# Platform infrastructure every signed-in user may read; never writable through the API.
GLOBAL_RESOURCES = {"cluster", "node", "accelerator-type"}
# The platform's operators' routes (Django staff): a tenant's owner is refused (403).
STAFF_ROUTES = {"purge-list"}
METHODS = ["get", "post", "put", "patch", "delete"]


PARAM_RE = re.compile(r"\(\?P<(\w+)>|<(?:\w+:)?(\w+)>")
# Values for the URL parameters that are not the object's own key.
PARAM_VALUES = {
    "number": 1,
    "path": "model.bin",
    "alias": "production",
    "key_id": "11111111-1111-1111-1111-111111111111",
    "name": "HF_TOKEN",  # a project secret's (/projects/{pk}/secrets/{name}/)
}


def api_route_names() -> list[tuple[str, bool]]:
    """(url name, takes an object) for every named route under api/v1/."""
    return sorted(
        (name, bool(params & {"pk", "dataset_pk"})) for name, params in api_routes().items()
    )


def api_routes() -> dict[str, frozenset[str]]:
    """url name -> the names of its URL parameters, for every named route under api/v1/."""
    found: dict[str, frozenset[str]] = {}

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern) and route.startswith("api/v1/") and entry.name:
                params = {a or b for a, b in PARAM_RE.findall(route)}
                found[entry.name] = frozenset(params)

    walk(get_resolver().url_patterns, "")
    return found


def resource_of(name: str, objects: dict) -> str | None:
    """The resource a route name belongs to: the longest object key it starts with
    (`model-alias-history` -> `model`, `dataset-version-files` -> `dataset-version`)."""
    keys = sorted(objects, key=len, reverse=True)
    return next((key for key in keys if name.startswith(f"{key}-")), None)


def route_kwargs(name: str, objects: dict) -> dict:
    """The URL kwargs of an object route: its object's pk (for the routes nested under a
    dataset, `datasets/{dataset_pk}/versions/{number}/...`, the dataset's), and a value for
    each other parameter."""
    params = api_routes()[name]
    basename = resource_of(name, objects)
    if basename == "dataset-version":
        version = objects["dataset-version"]
        kwargs = {"dataset_pk": version.dataset_id, "number": version.number}
    else:
        kwargs = {"pk": objects[basename].pk}
    return {key: kwargs.get(key, PARAM_VALUES.get(key)) for key in params}


def acme_objects(acme, cluster) -> dict:
    """One acme object per resource basename; a new detail route must add its own here."""
    job = make_job(project=acme.project, user=acme.users[Role.MEMBER], cluster=cluster)
    dataset = Dataset.objects.create(tenant=acme.tenant, project=acme.project, name="acme-data")
    dataset_version = DatasetVersion.objects.create(dataset=dataset, number=1)
    model = RegisteredModel.objects.create(tenant=acme.tenant, project=acme.project, name="acme-m")
    version = ModelVersion.objects.create(model=model, number=1)
    deployment = Deployment.objects.create(
        tenant=acme.tenant,
        project=acme.project,
        name="acme-serve",
        model=model,
        ref="acme-m:1",
        version=version,
        created_by=acme.users[Role.MEMBER],
    )
    ProjectSecret.objects.get_or_create(  # reached through its project: /projects/{pk}/secrets/
        project=acme.project,
        name="HF_TOKEN",
        defaults={
            "tenant": acme.tenant,
            "ciphertext": crypto.encrypt(f"hf_{acme.tenant.slug}_route_walk"),
        },
    )
    return {
        "deployment": deployment,
        "dataset": dataset,
        "dataset-version": dataset_version,
        "lineage-dataset": dataset_version,
        "model": model,
        "webhook": Webhook.objects.create(
            tenant=acme.tenant,
            url="https://hooks.acme.example/torus",
            events=["alias.changed"],
            secret="s" * 32,
        ),
        "job": job,
        "subscription": Subscription.objects.create(
            tenant=acme.tenant,
            user=acme.users[Role.MEMBER],
            events=["failed"],
            channel="email",
            address="member@acme.example",
        ),
        "notification-default": NotificationDefault.objects.create(
            tenant=acme.tenant, channel="email", events=["failed"]
        ),
        "failure-signature": FailureSignature.objects.create(
            tenant=acme.tenant, name="acme-oom", query="out of memory"
        ),
        "quota": Quota.objects.create(tenant=acme.tenant, gpus=4),
        "cluster": cluster,
        "node": cluster.nodes.first(),
        "accelerator-type": AcceleratorType.objects.create(name="npu", gres_name="npu"),
        "tenant": acme.tenant,
        "membership": Membership.objects.get(tenant=acme.tenant, user=acme.users[Role.VIEWER]),
        "invitation": Invitation.objects.create(
            tenant=acme.tenant,
            email="newcomer@acme.example",
            role=Role.MEMBER,
            token_hash=hash_token("tinv_route-walk"),
            expires_at=timezone.now() + timedelta(days=1),
        ),
        "project": acme.project,
        "project-member": ProjectMember.objects.get(project=acme.project),
        "token": AccessToken.objects.filter(tenant=acme.tenant).first(),
        "audit-event": AuditEvent.objects.filter(tenant=acme.tenant).first() or _audit_for(acme),
    }


def _audit_for(acme):
    from apps.tenancy.audit import audit_record

    return audit_record(
        actor=None,
        user=acme.users[Role.OWNER],
        tenant_id=acme.tenant.id,
        action="test.event",
        target=acme.project,
    )


def acme_state(acme) -> list:
    """Everything acme owns, as comparable rows."""
    rows = []
    for model in (
        Membership,
        Invitation,
        ProjectMember,
        AccessToken,
        AuditEvent,
        Job,
        JobEvent,
        Quota,
        FailureSignature,
        Dataset,
        DatasetVersion,
        RegisteredModel,
        ModelVersion,
        Webhook,
        Deployment,
        ProjectSecret,
    ):
        path = model.tenant_path
        rows += list(model.objects.filter(**{path: acme.tenant.id}).order_by("pk").values())
    rows += list(type(acme.project).objects.filter(tenant=acme.tenant).values())
    rows += list(type(acme.tenant).objects.filter(pk=acme.tenant.pk).values())
    return rows


def test_the_walk_covers_every_api_route():
    names = {name for name, _ in api_route_names()}
    assert {"project-list", "project-detail", "token-detail", "audit-event-list"} <= names


@pytest.mark.django_db
def test_other_tenant_gets_404_on_every_object_route(acme, globex, cluster):
    objects = acme_objects(acme, cluster)
    before = acme_state(acme)
    intruder = globex.client(Role.OWNER)
    checked = 0
    for name, takes_pk in api_route_names():
        if not takes_pk:
            continue
        basename = resource_of(name, objects)
        assert basename, f"route {name} has no acme object in acme_objects()"
        url = reverse(name, kwargs=route_kwargs(name, objects))
        for method in METHODS:
            response = getattr(intruder, method)(url, {}, format="json")
            if response.status_code == 405:
                continue
            if basename in GLOBAL_RESOURCES:
                assert (method, response.status_code) == ("get", 200), (method, url)
                continue
            assert response.status_code == 404, (method, url, response.status_code)
            assert response.json()["error"]["code"] == "not_found"
            checked += 1
    assert checked >= 20
    assert acme_state(acme) == before


@pytest.mark.django_db
def test_other_tenant_lists_never_show_acme_rows(acme, globex, cluster):
    acme_objects(acme, cluster)
    intruder = globex.client(Role.OWNER)
    for name, takes_pk in api_route_names():
        if takes_pk or name in PUBLIC_ROUTES or name.startswith("auth-"):
            continue
        response = intruder.get(reverse(name))
        if name in STAFF_ROUTES:
            assert response.status_code == 403, name
            continue
        if response.status_code == 405:  # a write-only route (e.g. job-batch)
            continue
        # 400: a read that needs a parameter (e.g. logs-context?id=)
        assert response.status_code in (200, 400), name
        body = response.content.decode()
        assert str(acme.tenant.id) not in body, name
        assert "acme" not in body, name


@pytest.mark.django_db
def test_anonymous_gets_401_on_every_route(acme, cluster):
    objects = acme_objects(acme, cluster)
    before = acme_state(acme)
    anonymous = bearer_client(None)
    for name, takes_pk in api_route_names():
        if name in PUBLIC_ROUTES:
            continue
        kwargs = route_kwargs(name, objects) if takes_pk else {}
        url = reverse(name, kwargs=kwargs)
        for method in METHODS:
            response = getattr(anonymous, method)(url, {}, format="json")
            if response.status_code == 405:
                continue
            assert response.status_code == 401, (method, url, response.status_code)
            assert response["WWW-Authenticate"] == "Bearer"
            assert response.json()["error"]["code"] == "not_authenticated"
    assert acme_state(acme) == before


@pytest.mark.django_db
def test_a_bad_token_is_401_not_anonymous(acme):
    response = bearer_client("tor_not-a-real-token").get(reverse("project-list"))
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Invalid token."


# Creates and batch submits name their tenant or project in the body: another tenant's is a 404.
CREATE_BODIES = {
    "job-list": lambda acme: {"project": str(acme.project.pk), "name": "x", "command": ["true"]},
    "job-batch": lambda acme: {
        "jobs": [{"project": str(acme.project.pk), "name": "x", "command": ["true"]}]
    },
    "dataset-list": lambda acme: {"project": str(acme.project.pk), "name": "intruder"},
    "model-list": lambda acme: {"project": str(acme.project.pk), "name": "intruder"},
    "deployment-list": lambda acme: {
        "project": str(acme.project.pk),
        "name": "intruder",
        "model": "acme-m:1",
    },
    "project-member-list": lambda acme: {
        "project": str(acme.project.pk),
        "user": acme.users[Role.VIEWER].username,
    },
}


def _tenant_body(name, acme) -> dict:
    body = {"tenant": acme.tenant.slug, "name": "intruder", "slug": "intruder", "query": "x"}
    if name == "quota-list":
        body["gpus"] = 1
    return body


@pytest.mark.django_db
def test_other_tenant_gets_404_when_a_write_names_acme(acme, globex, cluster):
    """Every POST route without a pk (create, batch) resolves the tenant or project its body
    names among the caller's own before anything else: acme's is a 404 to globex's owner."""
    acme_objects(acme, cluster)
    before = acme_state(acme)
    intruder = globex.client(Role.OWNER)
    checked = []
    for name, takes_pk in api_route_names():
        if takes_pk or name.startswith("auth-"):
            continue
        if name == "invitation-accept":  # names no tenant: the token does, and binds a person
            response = intruder.post(reverse(name), {"token": "tinv_route-walk"}, format="json")
            assert response.status_code == 403, response.content
            continue
        if name == "fit":  # names no tenant: an estimate from the body alone, nothing stored
            response = intruder.post(reverse(name), {}, format="json")
            assert response.status_code == 400, response.content
            continue
        body = CREATE_BODIES.get(name, lambda a, n=name: _tenant_body(n, a))(acme)
        response = intruder.post(reverse(name), body, format="json")
        if name in STAFF_ROUTES:
            assert response.status_code == 403, (name, response.content)
            continue
        if response.status_code == 405:
            continue
        assert response.status_code == 404, (name, response.status_code, response.content)
        assert response.json()["error"]["code"] == "not_found"
        checked.append(name)
    assert {"job-list", "job-batch", "project-list", "token-list", "quota-list"} <= set(checked)
    assert acme_state(acme) == before


@pytest.mark.django_db
def test_other_tenant_gets_404_on_every_custom_action(acme, globex, cluster):
    """The custom object actions (cancel, restart, logs, metrics) on acme's job: 404, never 403."""
    job = make_job(project=acme.project, user=acme.users[Role.MEMBER], cluster=cluster)
    intruder = globex.client(Role.OWNER)
    for name, method in [
        ("job-cancel", "post"),
        ("job-restart", "post"),
        ("job-output-logs", "get"),  # served by logs on the jobs' prefix
        ("job-output-metrics", "get"),
    ]:
        response = getattr(intruder, method)(reverse(name, kwargs={"pk": job.pk}))
        assert response.status_code == 404, (name, response.status_code)
    job.refresh_from_db()
    assert job.state == "PENDING" and not job.cancel_requested
