"""Input has bounds, stored data always renders (issue 34, item 4).

Every number the API takes has a minimum and a maximum, every string a maximum length, in the
serializer, the model and the schema: here the reported one (a quota's GPU-hours at 9.48e170,
which broke the audit log), and a few per app, each bound refused one past it with the field
named and accepted at it. Then the audit log: what it stores renders (no integer beyond 64
bits, no NaN, bounded size), and a row an older release stored with a huge integer renders
with that value as text instead of a 500."""

import json
import math

import pytest

from apps.core import jsonsafe
from apps.datasets.tasks import project_storage_ensure
from apps.jobs.spec import JobSpecSerializer
from apps.jobs.spec_fields import MAX_MEMORY_MB
from apps.quotas.models import MAX_GPU_HOURS_PER_MONTH, Quota
from apps.tenancy.audit import MAX_CHANGES_BYTES, audit_record
from apps.tenancy.models import AuditEvent, Project, Role

pytestmark = pytest.mark.django_db

HUGE = 9.48e170  # the reported value


def refused_at(response, *path) -> dict:
    """The 400's messages at `path` (a field, or a field and its nested keys)."""
    assert response.status_code == 400, response.content
    where = response.json()["error"]["fields"]
    for key in path:
        assert key in where, (path, response.json())
        where = where[key]
    return where


def quota_events() -> int:
    return AuditEvent.objects.filter(action__startswith="quota").count()


# -- quotas: the report --------------------------------------------------------------------


def test_a_quota_of_9e170_gpu_hours_is_a_400_at_the_field_and_nothing_is_written(acme):
    owner = acme.client(Role.OWNER)
    before = (Quota.objects.count(), quota_events())
    body = {"project": str(acme.project.pk), "gpu_hours_per_month": HUGE}
    messages = refused_at(owner.post("/api/v1/quotas/", body, format="json"), "gpu_hours_per_month")
    assert "100000000" in str(messages)
    assert (Quota.objects.count(), quota_events()) == before
    # the same limit at its maximum is taken, and the audit log still renders every page
    body["gpu_hours_per_month"] = MAX_GPU_HOURS_PER_MONTH
    created = owner.post("/api/v1/quotas/", body, format="json")
    assert created.status_code == 201, created.content
    assert owner.get("/api/v1/audit-events/").status_code == 200


@pytest.mark.parametrize(
    ("value", "ok"),
    [(-1, False), (0, True), (MAX_GPU_HOURS_PER_MONTH, True), (MAX_GPU_HOURS_PER_MONTH + 1, False)],
)
def test_a_quotas_gpu_hours_are_bounded_on_update(acme, value, ok):
    quota = Quota.objects.create(tenant=acme.tenant, project=acme.project)
    response = acme.client(Role.OWNER).patch(
        f"/api/v1/quotas/{quota.pk}/", {"gpu_hours_per_month": value}, format="json"
    )
    if ok:
        assert response.status_code == 200, response.content
        assert response.json()["gpu_hours_per_month"] == value
    else:
        refused_at(response, "gpu_hours_per_month")
        quota.refresh_from_db()
        assert quota.gpu_hours_per_month is None


def test_the_model_refuses_what_the_api_refuses(acme):
    from django.core.exceptions import ValidationError

    quota = Quota(tenant=acme.tenant, gpu_hours_per_month=HUGE)
    with pytest.raises(ValidationError) as refused:
        quota.full_clean()
    assert "gpu_hours_per_month" in refused.value.message_dict
    quota.gpu_hours_per_month = MAX_GPU_HOURS_PER_MONTH
    quota.full_clean()


# -- the audit log ---------------------------------------------------------------------------


def test_an_audit_row_holding_a_huge_integer_renders_it_as_text(acme):
    """As an older release stored it: jsonb keeps 9.48e170 as a 171-digit integer."""
    AuditEvent.objects.create(
        tenant=acme.tenant,
        action="quota.update",
        target_type="quota",
        changes={"gpu_hours_per_month": [None, HUGE], "gpus": [1, 2]},
    )
    stored = AuditEvent.objects.get(action="quota.update").changes["gpu_hours_per_month"][1]
    assert isinstance(stored, int) and stored > 2**64  # what PostgreSQL gives back
    owner = acme.client(Role.OWNER)
    page = owner.get("/api/v1/audit-events/?action=quota.update")
    assert page.status_code == 200, page.content
    (row,) = page.json()["results"]
    assert row["changes"]["gpu_hours_per_month"] == [None, str(stored)]
    assert row["changes"]["gpus"] == [1, 2]  # numbers in range stay numbers
    detail = owner.get(f"/api/v1/audit-events/{row['id']}/")
    assert detail.status_code == 200, detail.content
    assert detail.json()["changes"] == row["changes"]


def test_the_audit_log_stores_what_it_can_render(acme):
    event = audit_record(
        actor=None,
        tenant_id=acme.tenant.pk,
        action="test.bounds",
        changes={
            "huge": [0, HUGE],
            "huge_int": [0, 10**30],
            "nan": [0, math.nan],
            "fine": [1, 2.5],
        },
    )
    event.refresh_from_db()
    assert event.changes == {
        "huge": [0, repr(HUGE)],
        "huge_int": [0, str(10**30)],
        "nan": [0, None],
        "fine": [1, 2.5],
    }
    big = audit_record(
        actor=None,
        tenant_id=acme.tenant.pk,
        action="test.bounds",
        changes={f"field{i}": ["x" * 5000, "y" * 5000] for i in range(20)},
    )
    big.refresh_from_db()
    assert len(json.dumps(big.changes).encode()) <= MAX_CHANGES_BYTES + 1024
    assert set(big.changes) == {f"field{i}" for i in range(20)}
    assert acme.client(Role.OWNER).get("/api/v1/audit-events/").status_code == 200


def test_renderable_and_problem():
    assert jsonsafe.renderable({"a": [2**63, -(2**63), 2**63 - 1, math.inf]}) == {
        "a": [str(2**63), -(2**63), 2**63 - 1, None]
    }
    assert jsonsafe.problem({"x": 10**15}) == ""
    assert "between" in jsonsafe.problem({"x": 10**15 + 1})
    assert "finite" in jsonsafe.problem([math.nan])
    deep: list = []
    for _ in range(jsonsafe.MAX_DEPTH):
        deep = [deep]
    assert "nesting" in jsonsafe.problem(deep)
    assert jsonsafe.problem(deep[0]) == ""


# -- a few bounds per app: one past refused with the field named, the bound itself taken ----


@pytest.mark.parametrize(("length", "ok"), [(10_000, True), (10_001, False)])
def test_tenancy_a_projects_description(acme, length, ok):
    owner = acme.client(Role.OWNER)
    body = {"name": "Speech", "slug": "speech", "description": "d" * length}
    response = owner.post("/api/v1/projects/", body, format="json")
    if ok:
        assert response.status_code == 201, response.content
    else:
        refused_at(response, "description")
        assert not Project.objects.filter(tenant=acme.tenant, slug="speech").exists()


@pytest.mark.parametrize(("days", "ok"), [(0, False), (1, True), (3650, True), (3651, False)])
def test_tenancy_log_retention_days(acme, days, ok):
    response = acme.client(Role.OWNER).patch(
        f"/api/v1/tenants/{acme.tenant.pk}/", {"log_retention_days": days}, format="json"
    )
    if ok:
        assert response.status_code == 200, response.content
        assert response.json()["log_retention_days"] == days
    else:
        refused_at(response, "log_retention_days")


@pytest.mark.parametrize(("length", "ok"), [(10_000, True), (10_001, False)])
def test_datasets_a_description(acme, length, ok):
    body = {"project": str(acme.project.pk), "name": "corpus", "description": "d" * length}
    response = acme.client(Role.OWNER).post("/api/v1/datasets/", body, format="json")
    if ok:
        assert response.status_code == 201, response.content
    else:
        refused_at(response, "description")


@pytest.fixture
def model(acme):
    project_storage_ensure(str(acme.project.pk))  # a version's files go into it
    response = acme.client(Role.OWNER).post(
        "/api/v1/models/", {"project": str(acme.project.pk), "name": "tiny"}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.parametrize(("count", "ok"), [(50, True), (51, False)])
def test_registry_a_models_tags(acme, model, count, ok):
    tags = {f"t{i}": "v" for i in range(count)}
    response = acme.client(Role.OWNER).patch(
        f"/api/v1/models/{model['id']}/", {"tags": tags}, format="json"
    )
    if ok:
        assert response.status_code == 200, response.content
    else:
        refused_at(response, "tags")


@pytest.mark.parametrize(
    ("metric", "ok"),
    [(jsonsafe.MAX_NUMBER, True), (-jsonsafe.MAX_NUMBER, True), (jsonsafe.MAX_NUMBER + 1, False)],
)
def test_registry_a_versions_metrics(acme, model, metric, ok):
    response = acme.client(Role.OWNER).post(
        f"/api/v1/models/{model['id']}/versions/", {"metrics": {"loss": metric}}, format="json"
    )
    if ok:
        assert response.status_code == 201, response.content
        version = acme.client(Role.OWNER).get(
            f"/api/v1/models/{model['id']}/versions/{response.json()['number']}/"
        )
        assert version.json()["metrics"] == {"loss": metric}
    else:
        refused_at(response, "metrics", "loss")


def job(acme, **resources) -> dict:
    return {
        "project": str(acme.project.pk),
        "name": "bounded",
        "command": ["true"],
        "resources": {"gpus_per_node": 0, "time_limit": 1, **resources},
    }


@pytest.mark.parametrize(("memory", "ok"), [(0, False), (MAX_MEMORY_MB + 1, False), (1, True)])
def test_jobs_a_specs_memory(acme, cluster, memory, ok):
    body = job(acme, memory=memory)
    response = acme.client(Role.OWNER).post("/api/v1/jobs/", body, format="json")
    if ok:
        assert response.status_code == 201, response.content
    else:
        refused_at(response, "resources", "memory")


def test_jobs_a_specs_memory_at_its_maximum_is_valid(acme):
    """(No node here has 16 TiB: placement, after validation, would refuse the job.)"""
    spec = JobSpecSerializer(data=job(acme, memory=MAX_MEMORY_MB))
    assert spec.is_valid(), spec.errors
    assert spec.validated_data["resources"]["memory"] == MAX_MEMORY_MB


@pytest.mark.parametrize(
    ("priority", "ok"), [(-1000, True), (1000, True), (-1001, False), (1001, False)]
)
def test_jobs_a_specs_priority(acme, cluster, priority, ok):
    body = {**job(acme), "priority": priority}
    response = acme.client(Role.OWNER).post("/api/v1/jobs/", body, format="json")
    if ok:
        assert response.status_code == 201, response.content
    else:
        refused_at(response, "priority")


def test_jobs_a_labels_value_and_a_working_dir_have_a_length(acme, cluster):
    owner = acme.client(Role.OWNER)
    body = {**job(acme), "labels": {"team": "v" * 64}}
    refused_at(owner.post("/api/v1/jobs/", body, format="json"), "labels", "team")
    body = {**job(acme), "working_dir": "/" + "d" * 1024}
    refused_at(owner.post("/api/v1/jobs/", body, format="json"), "working_dir")


@pytest.mark.parametrize(("offset", "ok"), [(2**63 - 1, True), (2**63, False), (-1, False)])
def test_jobs_a_log_reads_offset(acme, cluster, offset, ok):
    owner = acme.client(Role.OWNER)
    created = owner.post("/api/v1/jobs/", job(acme), format="json")
    assert created.status_code == 201, created.content
    response = owner.get(f"/api/v1/jobs/{created.json()['id']}/logs/?offset={offset}")
    if ok:
        assert response.status_code == 200, response.content
    else:
        refused_at(response, "offset")


@pytest.mark.parametrize(("length", "ok"), [(64 * 1024, True), (64 * 1024 + 1, False)])
def test_secrets_a_values_length(acme, length, ok):
    response = acme.client(Role.OWNER).put(
        f"/api/v1/projects/{acme.project.pk}/secrets/HF_TOKEN/",
        {"value": "s" * length},
        format="json",
    )
    if ok:
        assert response.status_code == 201, response.content
    else:
        refused_at(response, "value")


def test_the_schema_shows_the_bounds(acme):
    schema = acme.client(Role.OWNER).get("/api/schema/?format=json").json()["components"]
    schemas = schema["schemas"]
    gpu_hours = schemas["QuotaRequest"]["properties"]["gpu_hours_per_month"]
    assert (gpu_hours["minimum"], gpu_hours["maximum"]) == (0, MAX_GPU_HOURS_PER_MONTH)
    assert schemas["ProjectRequest"]["properties"]["description"]["maxLength"] == 10_000
    metrics = schemas["VersionCreateRequest"]["properties"]["metrics"]
    assert metrics["maxProperties"] == 1000
    assert metrics["additionalProperties"]["maximum"] == jsonsafe.MAX_NUMBER
    memory = schemas["ResourcesRequest"]["properties"]["memory"]["oneOf"]
    assert {"type": "integer", "minimum": 1, "maximum": 16 * 1024 * 1024} in memory


def test_a_version_stored_with_a_huge_metric_renders(acme, model):
    """An older release took any finite metric: 1e300 comes back from jsonb as an integer."""
    from apps.registry.models import ModelVersion

    owner = acme.client(Role.OWNER)
    created = owner.post(f"/api/v1/models/{model['id']}/versions/", {}, format="json")
    assert created.status_code == 201, created.content
    ModelVersion.objects.filter(pk=created.json()["id"]).update(metrics={"loss": 1e300, "acc": 0.5})
    url = f"/api/v1/models/{model['id']}/versions/{created.json()['number']}/"
    response = owner.get(url)
    assert response.status_code == 200, response.content
    assert response.json()["metrics"]["acc"] == 0.5
    assert response.json()["metrics"]["loss"] == str(10**300)
    listing = owner.get(f"/api/v1/models/{model['id']}/versions/?full=1")
    assert listing.status_code == 200, listing.content


@pytest.mark.parametrize(("count", "ok"), [(2, True), (51, False)])
def test_registry_tags_sent_as_a_json_part_of_a_form_are_read_and_bounded(acme, model, count, ok):
    """DRF's DictField reads only `tags.key` form parts: a `tags` part holding JSON was
    dropped (the change silently lost, a 51-tag object taken). Now a model created from a form
    reads it as JSON; a model's PATCH takes JSON only and refuses a form outright."""
    tags = {f"t{i}": "v" for i in range(count)}
    owner = acme.client(Role.OWNER)
    form = {"project": str(acme.project.pk), "name": f"formed-{count}", "tags": json.dumps(tags)}
    response = owner.post("/api/v1/models/", form, format="multipart")
    if ok:
        assert response.status_code == 201, response.content
        assert response.json()["tags"] == tags
    else:
        refused_at(response, "tags")
    patched = owner.patch(
        f"/api/v1/models/{model['id']}/", {"tags": json.dumps(tags)}, format="multipart"
    )
    assert patched.status_code == 415, patched.content
    assert owner.get(f"/api/v1/models/{model['id']}/").json()["tags"] != tags
