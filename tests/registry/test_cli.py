"""`torus models ...` against a live portal: register (uploads in chunks, resumable), ls,
versions, alias, lineage, download (archive, one file, extracted), compare."""

import json
import os
import tarfile

import pytest

from apps.registry.models import ModelVersion
from apps.tenancy.models import Role
from tests.sdk.cli import run_cli
from torus import Client
from torus.models_cli import upload_file

WEIGHTS = os.urandom(2 * 1024 * 1024 + 17)  # three chunks


@pytest.fixture
def env(live_server, acme, models_area):
    return {"TORUS_URL": live_server.url, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    (path / "sub").mkdir(parents=True)
    (path / "weights.bin").write_bytes(WEIGHTS)
    (path / "sub" / "config.json").write_text('{"layers": 18}')
    return path


def cli(*args, env):
    done = run_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_register_list_alias_lineage_download_compare(env, acme, model_dir, tmp_path):
    card = tmp_path / "card.md"
    card.write_text("# ResNet\nTrained on nothing in particular.\n")
    out = cli(
        "models", "register", "resnet", "--path", str(model_dir), "--project", acme.project.slug,
        "--framework", "pytorch", "--metrics", '{"acc": 0.5, "loss": 1.5}',
        "--params", '{"lr": 0.1}', "--card", str(card), env=env,
    )  # fmt: skip
    assert out.startswith("resnet:1 ready: 2 files") and str(len(WEIGHTS) + 14) in out
    out = cli(
        "--json", "models", "register", "resnet", "--path", str(model_dir),
        "--metrics", '{"acc": 0.75}', "--params", '{"lr": 0.01}', "--alias", "staging", env=env,
    )  # fmt: skip
    v2 = json.loads(out)
    assert v2["number"] == 2 and v2["aliases"] == ["staging"] and v2["params"] == {"lr": "0.01"}
    assert ModelVersion.objects.get(number=1).card.startswith("# ResNet")

    listed = json.loads(cli("--json", "models", "ls", env=env))
    assert [(m["name"], m["latest_version"], m["aliases"]) for m in listed] == [
        ("resnet", 2, ["staging=2"])
    ]
    versions = cli("models", "versions", "resnet", env=env)
    assert versions.splitlines()[0].split()[:3] == ["NUMBER", "STATE", "STAGE"]
    assert [line.split()[0] for line in versions.splitlines()[1:]] == ["2", "1"]

    assert cli("models", "alias", "resnet", "1", "production", env=env).strip() == (
        "resnet@production -> 1"
    )
    lineage = cli("models", "lineage", "resnet@production", env=env)
    assert lineage.startswith("resnet:1 (ready") and "registered by hand" in lineage
    assert "acc=0.5" in lineage

    archive = tmp_path / "prod.tar"
    cli("models", "download", "resnet@production", "-o", str(archive), env=env)
    with tarfile.open(archive) as tar:
        assert tar.extractfile("resnet-v1/weights.bin").read() == WEIGHTS
    extracted = tmp_path / "unpacked"
    cli("models", "download", "resnet:2", "-o", str(extracted), "-x", env=env)
    assert (extracted / "resnet-v2" / "sub" / "config.json").read_text() == '{"layers": 18}'
    one = tmp_path / "w.bin"
    cli("models", "download", "resnet:1", "--file", "weights.bin", "-o", str(one), env=env)
    assert one.read_bytes() == WEIGHTS

    compared = cli("models", "compare", "resnet:1", "resnet:2", env=env)
    rows = {line.split()[0]: line.split()[1:] for line in compared.splitlines() if line}
    assert rows["acc"] == ["0.5", "0.75", "0.25"] and rows["loss"] == ["1.5", "-", "-"]
    assert rows["lr"] == ["0.1", "0.01", "*"]

    assert (
        cli("models", "unalias", "resnet", "staging", env=env).strip() == "resnet@staging removed"
    )


def test_cli_errors_are_messages(env, model_dir):
    done = run_cli("models", "lineage", "nothing:1", env=env)
    assert done.returncode == 1 and "no model named 'nothing'" in done.stderr
    done = run_cli("models", "register", "a b", "--path", str(model_dir), "--project", "x", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr


def test_an_upload_resumes_where_the_server_copy_ends(live_server, acme, models_area, tmp_path):
    source = tmp_path / "w.bin"
    source.write_bytes(WEIGHTS)
    with Client(url=live_server.url, token=acme.tokens[Role.MEMBER]) as client:
        model = client.request(
            "POST", "/api/v1/models/", json={"project": str(acme.project.pk), "name": "m"}
        )
        client.request("POST", f"/api/v1/models/{model['id']}/versions/", json={})
        base = f"/api/v1/models/{model['id']}/versions/1"
        # a first connection got 100 000 bytes through, then dropped
        client.request(
            "PUT", f"{base}/files/w.bin/", params={"offset": 0}, content=WEIGHTS[:100_000]
        )
        sent = []
        assert upload_file(client, base, "w.bin", source, sent.append) == len(WEIGHTS)
        assert sum(sent) == len(WEIGHTS) - 100_000  # only the rest travelled
        version = client.request("POST", f"{base}/commit/")
    assert version["size_bytes"] == len(WEIGHTS)


def test_a_small_directory_is_registered_in_one_request(env, acme, tmp_path):
    small = tmp_path / "small"
    (small / "sub").mkdir(parents=True)
    (small / "model.bin").write_bytes(b"m" * 1000)
    (small / "sub" / "labels.txt").write_text("a\nb\n")
    out = cli(
        "--json", "models", "register", "tiny", "--path", str(small), "--project",
        acme.project.slug, "--metrics", '{"acc": 0.5}', "--alias", "production", env=env,
    )  # fmt: skip
    version = json.loads(out)
    assert (version["state"], version["file_count"], version["aliases"]) == (
        "ready",
        2,
        ["production"],
    )
    assert ModelVersion.objects.get().files.count() == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_cli("models", "register", "tiny", "--path", str(empty), env=env)
    assert done.returncode == 1 and "holds no files" in done.stderr
    assert ModelVersion.objects.count() == 1
