"""Archive and restore from the SDK and the `torus` command, against a live portal over real
HTTP: a name typed at a terminal (or --confirm in a script) confirms an archive, a script
without --confirm is told so (nothing archived), the lists' --archived shows what the default
hides, and the API's refusals (400 at confirm, 403, 409) are printed as the API says them."""

import json
import subprocess

import pytest

from apps.datasets.models import Dataset, DatasetVersion
from apps.registry.models import RegisteredModel
from apps.serving.models import Deployment
from apps.tenancy.models import Project, Role
from tests.sdk.cli import cli_env, run_cli
from tests.sdk.cli import run_cli_on_a_terminal as on_a_terminal
from tests.serving.test_gateway import make_deployment
from torus import Client, TorusError

pytestmark = pytest.mark.django_db(transaction=True)


def cli(*args: str, url: str, token: str, stdin: str | None = "") -> subprocess.CompletedProcess:
    """The command with stdin a pipe (not a terminal), as in a script."""
    return run_cli(*args, env=cli_env(url=url, token=token), stdin=stdin)


def cli_on_a_terminal(*args: str, url: str, token: str, typed: str) -> tuple[int, str]:
    return on_a_terminal(
        *args, env=cli_env(url=url, token=token), typed=typed, prompt=b"to confirm: "
    )


def archived(model, pk) -> bool:
    return model.objects.get(pk=pk).archived_at is not None


def test_sdk_archives_and_restores_a_project(live_server, acme):
    slug = acme.project.slug
    with Client(url=live_server.url, token=acme.tokens[Role.ADMIN]) as admin:
        with pytest.raises(TorusError) as refused:
            admin.archive_project(slug, confirm="not-its-slug")
        assert refused.value.status == 400 and "confirm" in refused.value.fields
        assert not archived(Project, acme.project.pk)  # the control below is the same call

        done = admin.archive_project(slug, confirm=slug)
        assert done["id"] == str(acme.project.pk) and done["archived_at"]
        assert archived(Project, acme.project.pk)
        assert slug not in {p["slug"] for p in admin.projects()}
        assert [p["slug"] for p in admin.projects(archived=True)] == [slug]
        with pytest.raises(TorusError) as again:
            admin.archive_project(slug, confirm=slug)
        assert again.value.status == 409

        # a member may not restore it; an admin may, by slug though lists hide it
        with Client(url=live_server.url, token=acme.tokens[Role.MEMBER]) as member:
            with pytest.raises(TorusError) as denied:
                member.restore_project(slug)
            assert denied.value.status == 403
        assert admin.restore_project(slug)["archived_at"] is None
        assert not archived(Project, acme.project.pk)
        assert slug in {p["slug"] for p in admin.projects()}
        with pytest.raises(TorusError) as not_archived:
            admin.restore("project", str(acme.project.pk))
        assert not_archived.value.status == 409


def test_cli_archive_in_a_script_needs_confirm(live_server, acme):
    url, token, slug = live_server.url, acme.tokens[Role.ADMIN], acme.project.slug
    bare = cli("projects", "archive", slug, url=url, token=token)
    assert bare.returncode == 1 and "Traceback" not in bare.stderr
    assert bare.stderr.strip() == (
        f"torus: archiving project {slug} needs its slug typed, and standard input is not a "
        f"terminal: pass --confirm {slug}"
    )
    assert not archived(Project, acme.project.pk)

    wrong = cli("projects", "archive", slug, "--confirm", "acme", url=url, token=token)
    assert wrong.returncode == 1 and "confirm:" in wrong.stderr, wrong.stderr
    assert not archived(Project, acme.project.pk)

    done = cli("projects", "archive", slug, "--confirm", slug, url=url, token=token)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"archived project {slug}; an admin restores it with: torus projects restore {slug}"
    )
    assert archived(Project, acme.project.pk)

    # hidden from the list, shown by --archived (bare and as `ls`), with when
    assert slug not in cli("projects", url=url, token=token).stdout
    shown = cli("projects", "--archived", url=url, token=token)
    assert shown.stdout.splitlines()[0].split() == ["ID", "SLUG", "NAME", "ARCHIVED_AT"]
    assert slug in shown.stdout
    rows = json.loads(cli("--json", "projects", "ls", "--archived", url=url, token=token).stdout)
    assert [(r["slug"], bool(r["archived_at"])) for r in rows] == [(slug, True)]

    # archived again: the API's 409, as it says it
    again = cli("projects", "archive", slug, "--confirm", slug, url=url, token=token)
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert again.stderr.startswith("torus: ") and "archived" in again.stderr

    restored = cli("projects", "restore", slug, url=url, token=token)
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.strip() == f"restored project {slug}"
    assert not archived(Project, acme.project.pk)
    twice = cli("projects", "restore", slug, url=url, token=token)
    assert twice.returncode == 1 and twice.stderr.startswith("torus: ")


def test_cli_archive_asks_for_the_name_at_a_terminal(live_server, acme):
    url, token, slug = live_server.url, acme.tokens[Role.ADMIN], acme.project.slug
    status, shown = cli_on_a_terminal(
        "projects", "archive", slug, url=url, token=token, typed="acme"
    )
    assert status == 1 and f"Type its slug ({slug}) to confirm: " in shown
    assert "confirm:" in shown and not archived(Project, acme.project.pk)

    status, shown = cli_on_a_terminal("projects", "archive", slug, url=url, token=token, typed=slug)
    assert status == 0, shown
    assert f"archived project {slug}" in shown and archived(Project, acme.project.pk)


def test_cli_datasets_models_and_deployments(live_server, acme):
    url, token = live_server.url, acme.tokens[Role.ADMIN]
    owner = acme.users[Role.OWNER]
    dataset = Dataset.objects.create(
        tenant=acme.tenant, project=acme.project, name="images", created_by=owner
    )
    DatasetVersion.objects.create(dataset=dataset, number=1, created_by=owner)
    deployment = make_deployment(acme, name="chat")  # model `tiny`, with a version
    model = RegisteredModel.objects.get(name="tiny")

    for group, name, row in (
        ("datasets", "images", dataset),
        ("deployments", "chat", deployment),
        ("models", "tiny", model),
    ):
        done = cli(group, "archive", name, "--confirm", name, url=url, token=token)
        assert done.returncode == 0, done.stderr
        assert archived(type(row), row.pk)
        assert name not in cli(group, "ls", url=url, token=token).stdout
        listed = cli("--json", group, "ls", "--archived", url=url, token=token)
        assert [r["name"] for r in json.loads(listed.stdout)] == [name], listed.stderr

    # restoring the model brings back its deployment archived with it... the deployment was
    # archived on its own first, so it stays archived until restored itself
    assert cli("models", "restore", "tiny", url=url, token=token).returncode == 0
    assert not archived(RegisteredModel, model.pk) and archived(Deployment, deployment.pk)
    restored = cli(
        "deployments", "restore", "chat", "--project", acme.project.slug, url=url, token=token
    )
    assert restored.returncode == 0, restored.stderr
    assert not archived(Deployment, deployment.pk)
    assert cli("datasets", "restore", "images", url=url, token=token).returncode == 0
    assert not archived(Dataset, dataset.pk)

    missing = cli("datasets", "restore", "nothing-here", url=url, token=token)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "torus: no dataset 'nothing-here'"
