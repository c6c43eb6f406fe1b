"""Archive and restore instead of a cascade (apps/tenancy/lifecycle.py): a project, dataset,
model or deployment with history is archived (read-only, hidden from default lists, running
work stopped, restorable by an admin); one with no history may still be deleted."""

from django.urls import reverse

from apps.datasets.models import Dataset, DatasetVersion
from apps.jobs.models import Job
from apps.lifecycle.models import Kind, Purge, PurgeState
from apps.serving.models import DeploymentState
from apps.tenancy import lifecycle
from apps.tenancy.models import AuditEvent, Project, Role
from tests.factories import ProjectFactory, make_job
from tests.jobs.conftest import drive, slurm, submit
from tests.serving.test_gateway import make_deployment


def archive(client, kind: str, thing, confirm: str):
    return client.post(
        reverse(f"{kind}-archive", kwargs={"pk": thing.pk}), {"confirm": confirm}, format="json"
    )


def restore(client, kind: str, pk):
    return client.post(reverse(f"{kind}-restore", kwargs={"pk": pk}))


def message(response) -> str:
    return response.json()["error"]["message"]


def fields(response) -> dict:
    return response.json()["error"]["fields"]


def listed(client, kind: str, **params) -> set[str]:
    response = client.get(reverse(f"{kind}-list"), params)
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_a_project_with_history_is_archived_not_deleted(acme, cluster):
    admin = acme.client(Role.ADMIN)
    project = acme.project
    job = make_job(project=project, user=acme.users[Role.MEMBER], state="QUEUED", cluster=cluster)
    empty = ProjectFactory(tenant=acme.tenant, slug="empty")

    response = admin.delete(reverse("project-detail", kwargs={"pk": project.pk}))
    assert response.status_code == 409, response.content
    assert "has history (1 jobs)" in message(response)
    assert Project.objects.filter(pk=project.pk).exists() and Job.objects.filter(pk=job.pk)
    # the control: a project with nothing in it is still deleted
    assert admin.delete(reverse("project-detail", kwargs={"pk": empty.pk})).status_code == 204

    response = archive(admin, "project", project, confirm="not-its-slug")
    assert response.status_code == 400 and "confirm" in fields(response), response.content
    assert Project.objects.get(pk=project.pk).archived_at is None  # nothing half-done
    response = archive(admin, "project", project, confirm=project.slug)
    assert response.status_code == 200, response.content
    assert response.json()["archived_at"]
    # its unfinished job is cancelled (it never reached a backend: at once), quota freed
    job.refresh_from_db()
    assert job.state == "CANCELLED" and "archived" in job.state_reason
    assert AuditEvent.objects.filter(action="project.archive", target_id=str(project.pk))

    assert str(project.pk) not in listed(admin, "project")
    assert listed(admin, "project", archived="true") == {str(project.pk)}
    assert admin.get(reverse("project-detail", kwargs={"pk": project.pk})).status_code == 200
    assert archive(admin, "project", project, confirm=project.slug).status_code == 409


def test_an_archived_project_is_read_only(acme, cluster):
    admin, member = acme.client(Role.ADMIN), acme.client(Role.MEMBER)
    make_job(project=acme.project, user=acme.users[Role.MEMBER], state="SUCCEEDED", cluster=cluster)
    lifecycle.archive(actor=None, thing=acme.project, confirm=acme.project.slug)

    body = {"project": str(acme.project.pk), "name": "late", "command": ["true"]}
    response = member.post(reverse("job-list"), body, format="json")
    assert response.status_code == 400, response.content
    assert "archived" in fields(response)["project"][0]
    batch = {"jobs": [body, body]}
    response = member.post(reverse("job-batch"), batch, format="json")
    assert response.status_code == 400 and set(fields(response)["jobs"]) == {"0", "1"}
    response = member.post(
        reverse("dataset-list"), {"project": str(acme.project.pk), "name": "d"}, format="json"
    )
    assert response.status_code == 400 and "project" in fields(response)
    response = admin.patch(
        reverse("project-detail", kwargs={"pk": acme.project.pk}), {"name": "x"}, format="json"
    )
    assert response.status_code == 409 and "archived" in message(response)
    assert Job.objects.filter(name="late").count() == 0

    # restored by an admin (not a member), it takes jobs again
    assert restore(member, "project", acme.project.pk).status_code == 403
    response = restore(admin, "project", acme.project.pk)
    assert response.status_code == 200 and response.json()["archived_at"] is None
    assert restore(admin, "project", acme.project.pk).status_code == 409  # not archived
    assert member.post(reverse("job-list"), body, format="json").status_code == 201


def test_restoring_a_purged_thing_is_a_conflict(acme, globex):
    project = ProjectFactory(tenant=acme.tenant, slug="gone")
    Purge.objects.create(
        kind=Kind.PROJECT,
        target_id=project.pk,
        target_repr="acme/gone",
        tenant_id_value=acme.tenant.pk,
        tenant_slug="acme",
        state=PurgeState.DONE,
    )
    pk = project.pk
    Project.objects.filter(pk=pk).delete()
    response = restore(acme.client(Role.ADMIN), "project", pk)
    assert response.status_code == 409 and "purged" in message(response)
    # another tenant learns nothing of it
    assert restore(globex.client(Role.OWNER), "project", pk).status_code == 404


def test_datasets_and_models_with_versions_are_archived(acme):
    admin, member = acme.client(Role.ADMIN), acme.client(Role.MEMBER)
    owner = acme.users[Role.OWNER]
    dataset = Dataset.objects.create(
        tenant=acme.tenant, project=acme.project, name="images", created_by=owner
    )
    DatasetVersion.objects.create(dataset=dataset, number=1, created_by=owner)
    bare = Dataset.objects.create(tenant=acme.tenant, project=acme.project, name="bare")

    response = admin.delete(reverse("dataset-detail", kwargs={"pk": dataset.pk}))
    assert response.status_code == 409 and "1 versions" in message(response)
    assert admin.delete(reverse("dataset-detail", kwargs={"pk": bare.pk})).status_code == 204
    assert archive(admin, "dataset", dataset, confirm="images").status_code == 200
    assert str(dataset.pk) not in listed(member, "dataset")
    assert listed(member, "dataset", archived="true") == {str(dataset.pk)}
    response = member.post(reverse("dataset-version-list", kwargs={"dataset_pk": dataset.pk}))
    assert response.status_code == 409, response.content
    assert member.get(reverse("dataset-list"), {"archived": "maybe"}).status_code == 400


def test_a_model_archived_takes_its_deployments_and_restore_brings_them_back(acme):
    admin = acme.client(Role.ADMIN)
    deployment = make_deployment(acme, replicas_min=1, replicas_desired=1)
    model = deployment.model

    response = admin.delete(reverse("model-detail", kwargs={"pk": model.pk}))
    assert response.status_code == 409 and "versions" in message(response)
    assert archive(admin, "model", model, confirm=model.name).status_code == 200
    deployment.refresh_from_db()
    assert deployment.archived_at is not None and deployment.state == DeploymentState.STOPPED
    assert deployment.replicas_desired == 0
    assert str(deployment.pk) not in listed(admin, "deployment")
    response = admin.patch(
        reverse("deployment-detail", kwargs={"pk": deployment.pk}), {"replicas": 2}, format="json"
    )
    assert response.status_code == 409

    assert restore(admin, "model", model.pk).status_code == 200
    deployment.refresh_from_db()
    assert deployment.archived_at is None and deployment.state == DeploymentState.PENDING
    assert deployment.replicas_desired == 1


def test_a_tenant_restored_brings_back_what_was_archived_with_it(acme):
    earlier = ProjectFactory(tenant=acme.tenant, slug="earlier")
    lifecycle.archive(actor=None, thing=earlier, confirm="earlier")
    lifecycle.archive(actor=None, thing=acme.tenant, confirm=acme.tenant.slug)
    acme.project.refresh_from_db()
    assert acme.project.archived_at == acme.tenant.__class__.objects.get().archived_at
    response = acme.client(Role.OWNER).post(
        reverse("project-list"), {"name": "N", "slug": "n"}, format="json"
    )
    assert response.status_code == 400 and "archived" in str(fields(response))

    lifecycle.restore(actor=None, thing=acme.tenant)
    acme.project.refresh_from_db()
    earlier.refresh_from_db()
    assert acme.project.archived_at is None
    assert earlier.archived_at is not None  # archived on its own, before: stays archived


def test_archiving_a_project_stops_its_running_job_on_slurm(acme, slurm_cluster):
    member, admin = acme.client(Role.MEMBER), acme.client(Role.ADMIN)
    job_id = submit(member, acme.project, command=["sleep", "120"])["id"]
    job = drive(job_id, until={"RUNNING"})
    backend_id = job.attempts.get().backend_id

    assert archive(admin, "project", acme.project, confirm=acme.project.slug).status_code == 200
    job = drive(job_id)
    assert job.state == "CANCELLED"
    assert backend_id not in slurm("squeue", "-h", "-o", "%i").split()
