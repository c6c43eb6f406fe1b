"""The SDK and CLI against a live portal over real HTTP."""

import json
import subprocess
import sys

import pytest

from apps.tenancy.models import Project, Role
from tests.sdk.cli import ROOT, run_cli
from torus import Client, TorusError

pytestmark = pytest.mark.django_db(transaction=True)


def test_sdk_reads_and_writes(live_server, acme):
    with Client(url=live_server.url, token=acme.tokens[Role.ADMIN]) as client:
        assert client.me()["user"]["username"] == "acme-admin"
        created = client.create_project(name="Speech", slug="speech")
        assert Project.objects.filter(pk=created["id"], tenant=acme.tenant).exists()
        assert {p["slug"] for p in client.projects()} == {"acme-proj", "speech"}


def test_sdk_raises_the_api_error_with_fields(live_server, acme):
    client = Client(url=live_server.url, token=acme.tokens[Role.ADMIN])
    with pytest.raises(TorusError) as excinfo:
        client.create_project(name="Bad", slug="Not A Slug")
    assert excinfo.value.status == 400 and "slug" in excinfo.value.fields
    with pytest.raises(TorusError) as excinfo:
        client.revoke_token("00000000-0000-0000-0000-000000000000")
    assert excinfo.value.status == 404 and excinfo.value.code == "not_found"


def test_sdk_paginates_through_every_page(live_server, acme):
    for i in range(7):
        Project.objects.create(tenant=acme.tenant, name=f"P{i}", slug=f"p{i}")
    client = Client(url=live_server.url, token=acme.tokens[Role.VIEWER])
    rows = list(client.paginate("/api/v1/projects/", page_size=3))
    assert len(rows) == 8 and len({r["id"] for r in rows}) == 8


def test_cli_prints_tables_and_json(live_server, acme):
    env = {"TORUS_URL": live_server.url, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}
    table = run_cli("projects", env=env)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["ID", "SLUG", "NAME"]
    assert "acme-proj" in table.stdout
    as_json = run_cli("--json", "projects", env=env)
    assert [p["slug"] for p in json.loads(as_json.stdout)] == ["acme-proj"]
    who = run_cli("whoami", env=env)
    assert "acme-member" in who.stdout and "member" in who.stdout


def test_cli_token_create_and_revoke(live_server, acme, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'url = "{live_server.url}"\ntoken = "{acme.tokens[Role.VIEWER]}"\n')
    env = {"TORUS_CONFIG": str(config)}
    created = run_cli("--json", "token", "create", "laptop", "--read-only", env=env)
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)
    assert token["read_only"] is True and token["token"].startswith("tor_")
    assert run_cli("token", "revoke", token["id"], env=env).returncode == 0
    assert run_cli("--token", token["token"], "whoami", env=env).returncode == 1


def test_cli_errors_are_messages_not_tracebacks(live_server, acme):
    bad = run_cli("--url", live_server.url, "--token", "tor_wrong", "projects")
    assert bad.returncode == 1
    assert bad.stderr.strip() == "torus: Invalid token."
    down = run_cli("--url", "http://127.0.0.1:9", "--token", "x", "projects")
    assert down.returncode == 1
    assert down.stderr.startswith("torus: cannot reach Torus at http://127.0.0.1:9")
    assert "Traceback" not in bad.stderr + down.stderr
    usage = run_cli("frobnicate")
    assert usage.returncode == 2 and "invalid choice" in usage.stderr


def test_sdk_never_imports_django_or_the_portal():
    code = (
        "import sys, torus, torus.cli; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'apps', 'config')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
