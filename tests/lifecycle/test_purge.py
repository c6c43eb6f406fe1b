"""Purge on the real services: a project with a finished Slurm job (its log lines in
Elasticsearch, a checkpoint on disk), a dataset on S3 and one on POSIX, a model version, a
deployment row and a secret, archived, then purged: refused before its retention, and after
it every step's effect checked on the service itself; cut short after each step in turn and
resumed, it ends as one run would; twice is harmless; the old slug's new project gets a new
group and an empty tree, and its job cannot reach the old files."""

import io
import subprocess
import time
import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.datasets.models import Dataset
from apps.datasets.storage.s3 import S3Storage
from apps.datasets.tasks import project_storage_ensure
from apps.datasets.uploads import upload_append
from apps.datasets.versions import dataset_create, version_commit, version_create
from apps.identity.models import ClusterAssociation, PosixGroup
from apps.identity.posix_directory import directory
from apps.identity.storage import project_root, tenant_root
from apps.jobs.models import Job
from apps.lifecycle.models import Purge, PurgeState
from apps.lifecycle.purge import STEPS, purge_request, purge_run
from apps.logs.index import template_install
from apps.logs.shipper import ship_pass
from apps.registry.models import RegisteredModel
from apps.registry.uploads import version_create_with_files
from apps.registry.versions import model_create
from apps.secrets.models import ProjectSecret
from apps.secrets.services import secret_set
from apps.serving.models import Deployment
from apps.tenancy.models import AuditEvent, Project, Role
from apps.tenancy.services import token_create
from tests.conftest import bearer_client, make_world
from tests.datasets.test_s3_storage import s3_settings  # noqa: F401  (fixture)
from tests.factories import MembershipFactory, ProjectFactory, ProjectMemberFactory, UserFactory
from tests.identity.own_helper import own_helper  # noqa: F401  (fixture)
from tests.jobs.conftest import drive, output, slurm_cluster, slurm_env, submit  # noqa: F401
from tests.logs.conftest import count, delete_tenant_indices

pytestmark = pytest.mark.usefixtures("own_helper")


@pytest.fixture
def world(db):
    """A tenant of its own (names no other test's directory groups, Slurm accounts or users
    share: a gid changed under a name the cluster's group cache holds would keep that name's
    members out for GroupUpdateTime)."""
    return make_world(f"pg{uuid.uuid4().hex[:8]}")


def fresh_member(world, project) -> APIClient:
    """A person the cluster has never seen (no group list cached for them yet)."""
    user = MembershipFactory(
        tenant=world.tenant, role=Role.MEMBER, user__username=f"{world.tenant.slug}-new"
    ).user
    ProjectMemberFactory(project=project, user=user)
    _, token = token_create(actor=None, user=user, tenant=world.tenant, name="test")
    return bearer_client(token)


def owner(world) -> Actor:
    return Actor(user=world.users[Role.OWNER], roles={world.tenant.pk: Role.OWNER})


def sacctmgr(*args: str) -> str:
    result = subprocess.run(
        ["sacctmgr", "-n", "-P", *args],
        env=slurm_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def upload(version, files: dict[str, bytes]):
    for path, data in files.items():
        upload_append(
            actor=None,
            version=version,
            path=path,
            offset=0,
            total=len(data),
            length=len(data),
            chunks=[data],
        )
    return version_commit(actor=None, version=version)


@pytest.fixture
def history(world, slurm_cluster, s3_settings):  # noqa: F811
    """The world's project with everything a project holds, archived a day ago."""
    acme = world
    template_install()
    project = acme.project
    body = submit(
        acme.client(Role.MEMBER),
        project,
        command=["bash", "-c", 'echo purge-me-line; echo weights > "$TORUS_CHECKPOINT_DIR/ckpt"'],
    )
    job = drive(body["id"])
    assert job.state == "SUCCEEDED", (job.state_reason, output(job))
    deadline = time.monotonic() + 30
    while count(job=job) == 0:
        assert time.monotonic() < deadline, "the job's lines never reached Elasticsearch"
        ship_pass()
        time.sleep(0.2)
    project_storage_ensure(str(project.pk))
    local = dataset_create(actor=None, project=project, name="local")
    upload(version_create(actor=None, dataset=local), {"a.txt": b"posix bytes"})
    remote = dataset_create(actor=None, project=project, name="remote")
    upload(
        version_create(actor=None, dataset=remote, storage_kind="s3"),
        {"b.txt": b"s3 bytes"},
    )
    model = model_create(actor=owner(acme), project=project, name="tiny")
    version = version_create_with_files(
        actor=owner(acme), model=model, files=[("model.bin", io.BytesIO(b"model bytes"))]
    )
    Deployment.objects.create(
        tenant=acme.tenant,
        project=project,
        name="tiny",
        model=model,
        ref="tiny:1",
        version=version,
        created_by=acme.users[Role.OWNER],
    )
    secret_set(actor=owner(acme), project=project, name="HF_TOKEN", value="hf_secret")
    Project.objects.filter(pk=project.pk).update(archived_at=timezone.now() - timedelta(days=1))
    group = PosixGroup.objects.get(project=project)
    yield {"job": job, "local": local, "remote": remote, "group": group}
    S3Storage().delete(prefix=f"{acme.tenant.slug}/{project.slug}/datasets")
    delete_tenant_indices(acme.tenant.slug)


def assert_purged(acme, history) -> None:
    """Every step's effect, read from the service that held it."""
    project, job, group = acme.project, history["job"], history["group"]
    # files: the project's whole tree (checkpoint, POSIX dataset, model files)
    assert not project_root(project).exists()
    assert tenant_root(acme.tenant).is_dir()
    # Elasticsearch: the job's lines
    assert count(job=job) == 0
    # S3: the dataset's keys
    assert list(S3Storage().list(prefix=history["remote"].storage_prefix)) == []
    # Slurm: the project's account and its associations
    assert sacctmgr("show", "account", "where", f"name={group.name}", "format=account") == ""
    assert sacctmgr("show", "assoc", "where", f"account={group.name}", "format=user") == ""
    assert not ClusterAssociation.objects.filter(account=group.name).exists()
    # the directory: the group gone; its row kept, retired, so its gid is never handed out
    assert directory().find_group(group.name) is None
    retired = PosixGroup.objects.get(pk=group.pk)
    assert (retired.name, retired.gid, retired.project_id) == (f"r-{group.gid}", group.gid, None)
    # rows
    assert not Project.objects.filter(pk=project.pk).exists()
    assert not Job.objects.filter(pk=job.pk).exists()
    assert not Dataset.objects.filter(project_id=project.pk).exists()
    assert not RegisteredModel.objects.filter(project_id=project.pk).exists()
    assert not Deployment.objects.filter(project_id=project.pk).exists()
    assert not ProjectSecret.objects.filter(project_id=project.pk).exists()
    # the record and the audit
    purge = Purge.objects.get(kind="project", target_id=project.pk)
    assert purge.state == PurgeState.DONE and purge.steps_done == list(STEPS)
    where = f"{acme.tenant.slug}/{project.slug}"
    assert purge.target_repr == where and purge.finished_at is not None
    event = AuditEvent.objects.get(tenant=acme.tenant, action="project.purge")
    assert event.target_id == str(project.pk) and event.target_repr == where


def test_a_purge_cut_short_after_each_step_resumes_to_the_end(world, history, settings):
    acme = world
    project = acme.project
    # refused before the retention, and (the control) allowed after it
    settings.TORUS_ARCHIVE_RETENTION_DAYS = 30
    with pytest.raises(Conflict, match="retention of 30 days has not passed"):
        purge_request(kind="project", target_id=project.pk, requested_by=None)
    assert not Purge.objects.exists()
    settings.TORUS_ARCHIVE_RETENTION_DAYS = 0
    purge = purge_request(kind="project", target_id=project.pk, requested_by=None)

    for number, step in enumerate(STEPS):  # a crash after each step: the next run resumes
        purge = purge_run(purge=Purge.objects.get(pk=purge.pk), stop_after=step)
        assert purge.steps_done == list(STEPS[: number + 1]) and purge.runs == number + 1
        if step == "elasticsearch":  # outside first, the rows that name them still here
            assert count(job=history["job"]) == 0
            assert Job.objects.filter(pk=history["job"].pk).exists()
        if step == "files":
            assert not project_root(project).exists()
            assert Project.objects.filter(pk=project.pk).exists()
        if step != "rows":
            assert purge.state == PurgeState.RUNNING
            # a purge already running is resumed, not refused
            assert purge_request(kind="project", target_id=project.pk, requested_by=None) == purge
    assert_purged(acme, history)

    # twice is harmless; asked again, it answers when it was purged
    again = purge_run(purge=purge)
    assert again.state == PurgeState.DONE and again.runs == len(STEPS)
    with pytest.raises(Conflict, match="was purged on"):
        purge_request(kind="project", target_id=project.pk, requested_by=None)
    assert AuditEvent.objects.filter(action="project.purge").count() == 1


def test_the_old_slug_gets_a_new_group_and_an_empty_tree(world, history, settings):
    acme = world
    old_group, old_job = history["group"], history["job"]
    settings.TORUS_ARCHIVE_RETENTION_DAYS = 0
    purge = purge_request(kind="project", target_id=acme.project.pk, requested_by=None)
    purge_run(purge=purge)
    assert_purged(acme, history)

    new = ProjectFactory(tenant=acme.tenant, slug=acme.project.slug)
    root = project_root(new)
    old_checkpoint = root / "jobs" / str(old_job.pk) / "checkpoints" / "ckpt"
    script = f'id -G; ls -A "{root}/jobs"; cat "{old_checkpoint}" || echo NO-OLD-FILE'
    body = submit(fresh_member(acme, new), new, command=["bash", "-c", script])
    job = drive(body["id"])
    assert job.state == "SUCCEEDED", (job.state_reason, output(job))
    group = PosixGroup.objects.get(project=new)
    assert group.name == old_group.name and group.gid != old_group.gid
    assert directory().find_group(group.name).number == group.gid
    printed = output(job)
    gids = {int(g) for g in printed.splitlines()[0].split()}
    assert group.gid in gids and old_group.gid not in gids
    assert printed.splitlines()[1] == str(job.pk)  # its own directory, nothing older
    assert "NO-OLD-FILE" in printed and "weights" not in printed
    assert sorted(p.name for p in root.iterdir()) == ["datasets", "jobs", "models"]


def test_the_command_and_the_staff_api(acme, settings, own_helper):  # noqa: F811
    """Refusals as one line and 409s, each beside the allowed request; staff only."""
    settings.TORUS_ARCHIVE_RETENTION_DAYS = 0
    project = acme.project
    with pytest.raises(CommandError, match="is not archived; archive it first"):
        call_command("torus_lifecycle", "purge", "project", str(project.pk))
    with pytest.raises(CommandError, match="is not an id"):
        call_command("torus_lifecycle", "purge", "project", "nope")

    staff = UserFactory(username="operator", is_staff=True)
    api = bearer_client(None)
    api.force_authenticate(staff)
    member = acme.client(Role.OWNER)
    body = {"kind": "project", "id": str(project.pk)}
    response = api.post(reverse("purge-list"), body, format="json")
    assert response.status_code == 409, response.content
    assert "not archived" in response.json()["error"]["message"]
    assert api.post(reverse("purge-list"), {"kind": "x"}, format="json").status_code == 400

    Project.objects.filter(pk=project.pk).update(archived_at=timezone.now())
    assert member.post(reverse("purge-list"), body, format="json").status_code == 403
    assert member.get(reverse("purge-list")).status_code == 403
    response = api.post(reverse("purge-list"), body, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["state"] == "running"
    assert [p["id"] for p in api.get(reverse("purge-list")).json()["results"]] == [
        response.json()["id"]
    ]

    out = io.StringIO()
    call_command("torus_lifecycle", "resume", response.json()["id"], stdout=out)
    assert "  rows: done" in out.getvalue() and ": done" in out.getvalue().splitlines()[-1]
    assert not Project.objects.filter(pk=project.pk).exists()
    out = io.StringIO()
    call_command("torus_lifecycle", "purges", stdout=out)
    assert "done" in out.getvalue() and f"{acme.tenant.slug}/{project.slug}" in out.getvalue()
    response = api.post(reverse("purge-list"), body, format="json")
    assert response.status_code == 409 and "was purged on" in response.json()["error"]["message"]


def test_an_orphaned_group_row_does_not_stop_a_new_projects_job(world, slurm_cluster):  # noqa: F811
    """The reported wedge: the old cascade left p-acme_vision's row without its project; the
    new vision gets a fresh group, and its job runs."""
    from apps.identity.services import group_ensure

    acme = world
    old = ProjectFactory(tenant=acme.tenant, slug="vision")
    orphan = group_ensure(tenant=acme.tenant, project=old)
    Project.objects.filter(pk=old.pk).delete()  # the old cascade: the row is orphaned
    orphan.refresh_from_db()
    assert orphan.project_id is None and orphan.name == f"p-{acme.tenant.slug}_vision"

    new = ProjectFactory(tenant=acme.tenant, slug="vision")
    ProjectMemberFactory(project=new, user=acme.users[Role.MEMBER])
    job = drive(submit(acme.client(Role.MEMBER), new, command=["id", "-G"])["id"])
    assert job.state == "SUCCEEDED", (job.state, job.state_reason, list(job.events.values()))
    group = PosixGroup.objects.get(project=new)
    assert group.name == orphan.name and group.gid != orphan.gid
    gids = {int(g) for g in output(job).split()}
    assert group.gid in gids and orphan.gid not in gids
    orphan.refresh_from_db()
    assert orphan.name == f"r-{orphan.gid}" and orphan.project_id is None


def test_the_migration_retires_orphaned_project_groups(world):
    import importlib

    from django.apps import apps as django_apps

    from apps.identity.services import group_ensure

    acme = world
    migration = importlib.import_module(
        "apps.identity.migrations.0002_retire_orphaned_project_groups"
    )
    kept = group_ensure(tenant=acme.tenant, project=acme.project)
    tenant_group = group_ensure(tenant=acme.tenant)
    gone = ProjectFactory(tenant=acme.tenant, slug="gone")
    orphan = group_ensure(tenant=acme.tenant, project=gone)
    Project.objects.filter(pk=gone.pk).delete()
    migration.retire(django_apps, None)
    names = dict(PosixGroup.objects.values_list("gid", "name"))
    assert names[orphan.gid] == f"r-{orphan.gid}"
    assert names[kept.gid] == kept.name and names[tenant_group.gid] == tenant_group.name


def test_the_command_archives_and_restores_a_tenant(world):
    slug = world.tenant.slug
    with pytest.raises(CommandError, match="confirm"):
        call_command("torus_lifecycle", "archive", "tenant", slug, "--confirm", "wrong")
    with pytest.raises(CommandError, match="no tenant"):
        call_command("torus_lifecycle", "archive", "tenant", "nobody", "--confirm", "nobody")
    out = io.StringIO()
    call_command("torus_lifecycle", "archive", "tenant", slug, "--confirm", slug, stdout=out)
    world.tenant.refresh_from_db()
    assert world.tenant.archived_at is not None and f"archived tenant {slug}" in out.getvalue()
    with pytest.raises(CommandError, match="already archived"):
        call_command("torus_lifecycle", "archive", "tenant", slug, "--confirm", slug)
    call_command("torus_lifecycle", "restore", "tenant", slug, stdout=io.StringIO())
    world.tenant.refresh_from_db()
    assert world.tenant.archived_at is None
