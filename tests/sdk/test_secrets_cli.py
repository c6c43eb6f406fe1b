"""Project secrets from the SDK and the `torus secrets` command, against a live portal over real
HTTP: values go in by stdin, a hidden prompt or a file (never argv) and never come back out."""

import json

import pytest

from apps.secrets.crypto import decrypt
from apps.secrets.models import ProjectSecret
from apps.tenancy.models import Role
from tests.sdk.cli import cli_env, run_cli
from tests.sdk.cli import run_cli_on_a_terminal as on_a_terminal
from torus import Client, TorusError

pytestmark = pytest.mark.django_db(transaction=True)
VALUE = "hf_s3cr3t-Value-for-the-test"


def run_cli_on_a_terminal(*args: str, token: str, url: str, typed: str) -> tuple[int, str]:
    return on_a_terminal(
        *args, env=cli_env(url=url, token=token), typed=typed, prompt=b"(not shown)"
    )


def stored_value(project, name: str) -> str | None:
    """What the platform holds for `name`, decrypted (None: no such secret)."""
    row = ProjectSecret.objects.filter(project=project, name=name).first()
    return None if row is None else decrypt(row.ciphertext)


def test_sdk_sets_lists_replaces_and_deletes_and_never_reads_a_value(live_server, acme):
    with Client(url=live_server.url, token=acme.tokens[Role.MEMBER]) as client:
        created = client.set_secret("acme-proj", "HF_TOKEN", VALUE)
        assert created["name"] == "HF_TOKEN" and created["version"] == 1
        replaced = client.set_secret(str(acme.project.id), "HF_TOKEN", VALUE + "2")
        assert replaced["version"] == 2
        rows = client.secrets("acme-proj")
        assert [(r["name"], r["version"]) for r in rows] == [("HF_TOKEN", 2)]
        assert VALUE not in json.dumps([created, replaced, rows])
        assert set(rows[0]) >= {"name", "version", "created_at", "updated_at", "updated_by"}
        assert stored_value(acme.project, "HF_TOKEN") == VALUE + "2"
        client.delete_secret("acme-proj", "HF_TOKEN")
        assert client.secrets("acme-proj") == []
        assert stored_value(acme.project, "HF_TOKEN") is None


def test_sdk_viewer_lists_but_may_not_set_or_delete(live_server, acme):
    with Client(url=live_server.url, token=acme.tokens[Role.ADMIN]) as admin:
        admin.set_secret("acme-proj", "WB", VALUE)  # allowed: a tenant admin
    with Client(url=live_server.url, token=acme.tokens[Role.VIEWER]) as viewer:
        assert [r["name"] for r in viewer.secrets("acme-proj")] == ["WB"]
        with pytest.raises(TorusError) as refused:
            viewer.set_secret("acme-proj", "WB", "overwritten")
        assert refused.value.status == 403
        with pytest.raises(TorusError) as refused:
            viewer.delete_secret("acme-proj", "WB")
        assert refused.value.status == 403
    assert stored_value(acme.project, "WB") == VALUE


def test_sdk_another_tenants_project_is_not_found(live_server, acme, globex):
    with Client(url=live_server.url, token=globex.tokens[Role.OWNER]) as client:
        client.set_secret(str(globex.project.id), "OWN", VALUE)  # allowed: its own project
        with pytest.raises(TorusError) as refused:
            client.set_secret(str(acme.project.id), "STOLEN", VALUE)
        assert refused.value.status == 404
        with pytest.raises(TorusError) as refused:
            client.secrets(str(acme.project.id))
        assert refused.value.status == 404
    assert stored_value(acme.project, "STOLEN") is None


def test_sdk_bad_name_is_refused_naming_the_field_before_any_request(live_server, acme):
    with Client(url=live_server.url, token=acme.tokens[Role.MEMBER]) as client:
        for bad in ("1ABC", "a/b", "A-B", "x" * 129, ""):
            with pytest.raises(TorusError) as refused:
                client.set_secret(str(acme.project.id), bad, VALUE)
            assert refused.value.status == 400 and "name" in refused.value.fields, bad
        client.set_secret(str(acme.project.id), "_A1", VALUE)  # allowed: a valid name
        assert [r["name"] for r in client.secrets("acme-proj")] == ["_A1"]


def test_cli_set_from_piped_stdin_then_ls_and_rm(live_server, acme):
    env = cli_env(url=live_server.url, token=acme.tokens[Role.MEMBER])
    set_hf = ("secrets", "set", "HF_TOKEN", "--project", "acme-proj")
    done = run_cli(*set_hf, env=env, stdin=VALUE + "\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "created HF_TOKEN (version 1) in acme-proj"
    assert stored_value(acme.project, "HF_TOKEN") == VALUE  # echo's newline dropped
    again = run_cli(*set_hf, env=env, stdin="second")
    assert again.returncode == 0 and "replaced HF_TOKEN (version 2)" in again.stdout
    table = run_cli("secrets", "ls", "--project", "acme-proj", env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "VERSION", "UPDATED_AT", "UPDATED_BY"]
    assert lines[1].split()[:2] == ["HF_TOKEN", "2"] and "acme-member" in lines[1]
    as_json = run_cli("--json", "secrets", "ls", "--project", "acme-proj", env=env)
    rows = json.loads(as_json.stdout)
    assert [r["name"] for r in rows] == ["HF_TOKEN"] and "value" not in rows[0]
    for out in (done, again, table, as_json):
        assert VALUE not in out.stdout + out.stderr and "second" not in out.stdout + out.stderr
    gone = run_cli("secrets", "rm", "HF_TOKEN", "--project", "acme-proj", env=env)
    assert gone.returncode == 0 and gone.stdout.strip() == "deleted HF_TOKEN from acme-proj"
    assert stored_value(acme.project, "HF_TOKEN") is None


def test_cli_set_from_file_keeps_the_text_exactly(live_server, acme, tmp_path):
    pem = "-----BEGIN KEY-----\nabc\n-----END KEY-----\n"
    (tmp_path / "key.pem").write_text(pem)
    done = run_cli(
        "secrets",
        "set",
        "SSH_KEY",
        "--project",
        "acme-proj",
        "--from-file",
        str(tmp_path / "key.pem"),
        env=cli_env(url=live_server.url, token=acme.tokens[Role.MEMBER]),
    )
    assert done.returncode == 0, done.stderr
    assert stored_value(acme.project, "SSH_KEY") == pem
    (tmp_path / "big").write_bytes(b"x" * (64 * 1024 + 1))
    big = run_cli(
        "secrets",
        "set",
        "BIG",
        "--project",
        "acme-proj",
        "--from-file",
        str(tmp_path / "big"),
        env=cli_env(url=live_server.url, token=acme.tokens[Role.MEMBER]),
    )
    assert big.returncode == 1 and "64 KiB" in big.stderr and "Traceback" not in big.stderr
    assert stored_value(acme.project, "BIG") is None


def test_cli_prompts_without_echo_on_a_terminal(live_server, acme):
    status, shown = run_cli_on_a_terminal(
        "secrets",
        "set",
        "WANDB_API_KEY",
        "--project",
        "acme-proj",
        token=acme.tokens[Role.MEMBER],
        url=live_server.url,
        typed=VALUE,
    )
    assert status == 0, shown
    assert "value of WANDB_API_KEY (not shown):" in shown
    assert "created WANDB_API_KEY (version 1)" in shown
    assert VALUE not in shown  # typed, not echoed
    assert stored_value(acme.project, "WANDB_API_KEY") == VALUE


def test_cli_never_takes_the_value_on_the_command_line(live_server, acme):
    token, url = acme.tokens[Role.MEMBER], live_server.url
    flag = run_cli(
        "secrets",
        "set",
        "A",
        "--project",
        "acme-proj",
        "--value",
        VALUE,
        env=cli_env(url=url, token=token),
        stdin="",
    )
    positional = run_cli(
        "secrets",
        "set",
        "A",
        VALUE,
        "--project",
        "acme-proj",
        env=cli_env(url=url, token=token),
        stdin="",
    )
    for refused in (flag, positional):
        assert refused.returncode == 2 and "unrecognized arguments" in refused.stderr
    allowed = run_cli(
        "secrets",
        "set",
        "A",
        "--project",
        "acme-proj",
        env=cli_env(url=url, token=token),
        stdin=VALUE,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert stored_value(acme.project, "A") == VALUE


def test_cli_errors_are_one_line_messages_and_nothing_is_stored(live_server, acme):
    token, url = acme.tokens[Role.MEMBER], live_server.url
    bad_name = run_cli(
        "secrets",
        "set",
        "NOT-A-NAME",
        "--project",
        "acme-proj",
        env=cli_env(url=url, token=token),
        stdin=VALUE,
    )
    assert bad_name.returncode == 1 and "name:" in bad_name.stderr
    too_big = run_cli(
        "secrets",
        "set",
        "HUGE",
        "--project",
        "acme-proj",
        env=cli_env(url=url, token=token),
        stdin="x" * (64 * 1024 + 1),
    )
    assert too_big.returncode == 1 and "value" in too_big.stderr
    empty = run_cli(
        "secrets",
        "set",
        "EMPTY",
        "--project",
        "acme-proj",
        env=cli_env(url=url, token=token),
        stdin="\n",
    )
    assert empty.returncode == 1 and "no value given" in empty.stderr
    no_project = run_cli("secrets", "ls", "--project", "nope", env=cli_env(url=url, token=token))
    assert no_project.returncode == 1 and "no single project with slug 'nope'" in no_project.stderr
    viewer = run_cli(
        "secrets",
        "rm",
        "X",
        "--project",
        "acme-proj",
        env=cli_env(url=url, token=acme.tokens[Role.VIEWER]),
    )
    assert viewer.returncode == 1 and viewer.stderr.startswith("torus: ")
    for out in (bad_name, too_big, empty, no_project, viewer):
        assert "Traceback" not in out.stderr
    for name in ("HUGE", "EMPTY"):
        assert stored_value(acme.project, name) is None
    ok = run_cli(
        "secrets",
        "set",
        "HUGE",
        "--project",
        "acme-proj",
        env=cli_env(url=url, token=token),
        stdin="x" * (64 * 1024),
    )  # allowed: exactly 64 KiB
    assert ok.returncode == 0, ok.stderr
