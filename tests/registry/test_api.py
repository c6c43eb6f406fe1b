"""The registry over the API on the real database and the POSIX storage in the tenant tree:
models, uploaded versions with a server-side manifest, downloads, aliases with their history
in the audit log, stages, compare, tenant isolation and roles, bad input."""

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest
from django.urls import reverse

from apps.registry.models import ModelFile, ModelVersion, RegisteredModel
from apps.tenancy.models import AuditEvent, Role

pytestmark = pytest.mark.django_db

WEIGHTS = os.urandom(300_000)
CONFIG = b'{"hidden": 64}\n'


def models_url(*parts) -> str:
    return "/api/v1/models/" + "".join(f"{p}/" for p in parts)


def create_model(client, project, name="resnet") -> dict:
    response = client.post(
        reverse("model-list"), {"project": str(project.pk), "name": name}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def put_chunk(client, model_id, number, path, data: bytes, offset=0):
    return client.put(
        models_url(model_id, "versions", number, "files", path) + f"?offset={offset}",
        data=data,
        content_type="application/octet-stream",
    )


def upload_version(client, model_id, files: dict, **fields) -> dict:
    response = client.post(models_url(model_id, "versions"), fields, format="json")
    assert response.status_code == 201, response.content
    number = response.json()["number"]
    for path, data in files.items():
        offset = 0
        for start in range(0, len(data), 100_000):
            chunk = data[start : start + 100_000]
            response = put_chunk(client, model_id, number, path, chunk, offset)
            assert response.status_code == 200, response.content
            offset = response.json()["size"]
    response = client.post(models_url(model_id, "versions", number, "commit"))
    assert response.status_code == 200, response.content
    return response.json()


def test_upload_commit_manifest_download_and_archive(acme, models_area):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    metrics = {f"m{i}": i / 10 for i in range(20)}
    params = {f"p{i}": str(i) for i in range(20)}
    version = upload_version(
        client,
        model["id"],
        {"model.pt": WEIGHTS, "conf/config.json": CONFIG},
        framework="pytorch",
        metrics=metrics,
        params=params,
        card="# ResNet\n\n<script>alert(1)</script> stays text",
    )
    assert version["state"] == "ready" and version["number"] == 1
    assert version["file_count"] == 2 and version["size_bytes"] == len(WEIGHTS) + len(CONFIG)
    assert version["metrics"] == metrics and version["params"] == params
    assert version["card"].endswith("<script>alert(1)</script> stays text")  # stored as given

    manifest = client.get(models_url(model["id"], "versions", 1, "files")).json()
    assert manifest == [
        {
            "path": "conf/config.json",
            "size": len(CONFIG),
            "sha256": hashlib.sha256(CONFIG).hexdigest(),
        },
        {"path": "model.pt", "size": len(WEIGHTS), "sha256": hashlib.sha256(WEIGHTS).hexdigest()},
    ]
    lines = "".join(f"{r['path']}\t{r['size']}\t{r['sha256']}\n" for r in manifest)
    assert version["manifest_sha256"] == hashlib.sha256(lines.encode()).hexdigest()

    # the bytes lie in the tenant's tree, sealed (no write bits)
    stored = models_area / model["id"] / "v1" / "model.pt"
    assert stored.read_bytes() == WEIGHTS
    assert not stored.stat().st_mode & 0o222

    viewer = acme.client(Role.VIEWER)
    response = viewer.get(models_url(model["id"], "versions", 1, "files", "model.pt"))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == WEIGHTS
    assert response["X-Torus-Sha256"] == hashlib.sha256(WEIGHTS).hexdigest()

    response = viewer.get(models_url(model["id"], "versions", 1, "archive"))
    assert response.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(b"".join(response.streaming_content))) as archive:
        names = archive.getnames()
        assert names == ["resnet-v1/conf/config.json", "resnet-v1/model.pt"]
        assert archive.extractfile("resnet-v1/model.pt").read() == WEIGHTS

    # immutable: no more files once ready, and a second commit changes nothing
    response = put_chunk(client, model["id"], 1, "extra.bin", b"x")
    assert response.status_code == 409
    again = client.post(models_url(model["id"], "versions", 1, "commit"))
    assert (
        again.status_code == 200 and again.json()["manifest_sha256"] == version["manifest_sha256"]
    )
    assert ModelFile.objects.filter(version__model_id=model["id"]).count() == 2


def test_upload_resumes_at_the_stored_offset(acme, models_area):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    client.post(models_url(model["id"], "versions"), {}, format="json")
    assert put_chunk(client, model["id"], 1, "w.bin", WEIGHTS[:1000]).json()["size"] == 1000
    # a retried chunk at a stale offset is refused with where to continue
    response = put_chunk(client, model["id"], 1, "w.bin", WEIGHTS[:1000], offset=0)
    assert response.status_code == 409
    assert "stored: 1000" in response.json()["error"]["message"]
    status = client.get(models_url(model["id"], "versions", 1, "uploads", "w.bin")).json()
    assert status == {"path": "w.bin", "size": 1000}
    response = put_chunk(client, model["id"], 1, "w.bin", WEIGHTS[1000:], offset=1000)
    assert response.json()["size"] == len(WEIGHTS)
    # not committed yet: nothing to download
    assert client.get(models_url(model["id"], "versions", 1, "files", "w.bin")).status_code == 404
    version = client.post(models_url(model["id"], "versions", 1, "commit")).json()
    assert version["state"] == "ready"
    got = client.get(models_url(model["id"], "versions", 1, "files", "w.bin"))
    assert b"".join(got.streaming_content) == WEIGHTS


@pytest.mark.parametrize(
    "path",
    ["../escape.bin", "a/../../escape.bin", "%2e%2e/escape.bin", "a//b", "./x", "a/\x01b"],
)
def test_file_paths_that_leave_the_version_are_refused(acme, models_area, path):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    client.post(models_url(model["id"], "versions"), {}, format="json")
    canary = Path(models_area).parent / "escape.bin"
    response = put_chunk(client, model["id"], 1, path, b"evil")
    assert response.status_code in (400, 404), response.content
    assert not canary.exists()
    assert not ModelFile.objects.exists()


def test_an_interrupted_upload_leaves_no_ready_version(acme, models_area):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    client.post(models_url(model["id"], "versions"), {}, format="json")
    put_chunk(client, model["id"], 1, "w.bin", WEIGHTS[:5000])
    version = ModelVersion.objects.get(model_id=model["id"])
    assert version.state == "open"
    listed = client.get(models_url(model["id"], "versions")).json()["results"]
    assert [v["state"] for v in listed] == ["open"]
    # nothing is downloadable and the alias cannot point at it
    response = client.put(models_url(model["id"], "aliases", "production"), {"version": 1})
    assert response.status_code == 400


def test_aliases_move_with_history_in_the_audit_log(acme, models_area):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    for i in range(3):
        upload_version(client, model["id"], {"w.bin": bytes([i]) * 10}, metrics={"acc": i / 10})
    for number in (1, 2, 3):
        response = client.put(
            models_url(model["id"], "aliases", "production"), {"version": number}, format="json"
        )
        assert response.status_code == 200, response.content
    client.put(models_url(model["id"], "aliases", "staging"), {"version": 3}, format="json")
    assert client.delete(models_url(model["id"], "aliases", "staging")).status_code == 204

    detail = client.get(models_url(model["id"])).json()
    assert detail["aliases"] == {"production": 3}
    history = client.get(models_url(model["id"], "alias-history")).json()
    moves = [(h["alias"], h["from_version"], h["to_version"], h["actor"]) for h in history]
    member = acme.users[Role.MEMBER].username
    assert moves == [
        ("production", None, 1, member),
        ("production", 1, 2, member),
        ("production", 2, 3, member),
        ("staging", None, 3, member),
        ("staging", 3, None, member),
    ]
    events = AuditEvent.objects.filter(action="model.alias", target_id=model["id"])
    assert events.count() == 5
    # the audit endpoint (admins) shows the same moves
    admin_view = acme.client(Role.ADMIN).get("/api/v1/audit-events/?action=model.alias").json()
    assert len(admin_view["results"]) == 5

    for bad in ("Production", "latest", "a b", "-x"):
        response = client.put(models_url(model["id"], "aliases", bad), {"version": 1})
        assert response.status_code in (400, 404), bad


@pytest.mark.django_db(transaction=True)
def test_concurrent_moves_of_one_alias_are_each_audited_from_where_the_last_left_it(
    acme, models_area
):
    """Eight moves at once, the alias made by the first to get there: each waits for the one
    before it, so the audit log's moves chain (each from where the previous one left it)
    and the alias ends where the last one pointed it."""
    import itertools
    import threading

    from django.db import connection

    from apps.registry.aliases import alias_set

    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    for i in range(4):
        upload_version(client, model["id"], {"w.bin": bytes([i])})
    row = RegisteredModel.objects.get(pk=model["id"])
    versions = list(ModelVersion.objects.filter(model=row).order_by("number"))
    barrier, errors = threading.Barrier(8), []

    def move(version):
        try:
            barrier.wait()
            alias_set(actor=None, model=row, name="production", version=version)
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=move, args=(versions[i % 4],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    events = AuditEvent.objects.filter(action="model.alias", target_id=model["id"])
    moves = [e.changes["version"] for e in events.order_by("created_at")]
    assert moves[0][0] is None and len(moves) >= 4
    for before, after in itertools.pairwise(moves):
        assert after[0] == before[1] != after[1]
    final = client.get(models_url(model["id"])).json()["aliases"]["production"]
    assert final == moves[-1][1]


def test_stages_follow_their_transitions(acme, models_area):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(client, model["id"], {"w.bin": b"1"})
    url = models_url(model["id"], "versions", 1, "stage")
    assert client.post(url, {"stage": "staging"}).json()["stage"] == "staging"
    assert client.post(url, {"stage": "production"}).json()["stage"] == "production"
    response = client.post(url, {"stage": "none"})
    assert response.status_code == 400
    assert "cannot move" in response.json()["error"]["fields"]["stage"][0]
    assert client.post(url, {"stage": "archived"}).json()["stage"] == "archived"
    assert AuditEvent.objects.filter(action="model_version.stage").count() == 3


def test_compare_two_versions(acme, models_area):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(
        client,
        model["id"],
        {"w": b"1"},
        metrics={"acc": 0.5, "loss": 1.0},
        params={"lr": "0.1", "depth": "18"},
    )
    upload_version(
        client,
        model["id"],
        {"w": b"2"},
        metrics={"acc": 0.75, "f1": 0.6},
        params={"lr": "0.01", "depth": "18"},
    )
    data = client.get(models_url(model["id"], "compare") + "?a=1&b=2").json()
    assert data["metrics"] == {
        "acc": {"a": 0.5, "b": 0.75, "delta": 0.25},
        "f1": {"a": None, "b": 0.6, "delta": None},
        "loss": {"a": 1.0, "b": None, "delta": None},
    }
    assert data["params"]["lr"] == {"a": "0.1", "b": "0.01", "changed": True}
    assert data["params"]["depth"]["changed"] is False
    assert client.get(models_url(model["id"], "compare") + "?a=1&b=9").status_code == 404


def test_viewer_reads_but_cannot_write(acme, models_area):
    member = acme.client(Role.MEMBER)
    model = create_model(member, acme.project)
    upload_version(member, model["id"], {"w.bin": b"abc"})
    viewer = acme.client(Role.VIEWER)
    assert viewer.get(models_url(model["id"], "versions")).status_code == 200
    assert viewer.get(models_url(model["id"], "versions", 1, "lineage")).status_code == 200
    refused = [
        viewer.post(reverse("model-list"), {"project": str(acme.project.pk), "name": "x"}),
        viewer.post(models_url(model["id"], "versions"), {}, format="json"),
        put_chunk(viewer, model["id"], 1, "w2.bin", b"x"),
        viewer.post(models_url(model["id"], "versions", 1, "commit")),
        viewer.put(models_url(model["id"], "aliases", "production"), {"version": 1}),
        viewer.post(models_url(model["id"], "versions", 1, "stage"), {"stage": "staging"}),
        viewer.patch(models_url(model["id"]), {"description": "x"}, format="json"),
        viewer.delete(models_url(model["id"])),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert ModelVersion.objects.count() == 1


def test_a_member_outside_the_project_cannot_register_in_it(acme, models_area):
    from tests.factories import ProjectFactory

    other = ProjectFactory(tenant=acme.tenant, slug="other")
    client = acme.client(Role.MEMBER)
    response = client.post(reverse("model-list"), {"project": str(other.pk), "name": "m"})
    assert response.status_code == 403
    admin = acme.client(Role.ADMIN)
    model = create_model(admin, other, name="m")
    response = client.post(models_url(model["id"], "versions"), {}, format="json")
    assert response.status_code == 403


def test_another_tenants_models_are_not_found(acme, globex, models_area, globex_area):
    theirs = create_model(globex.client(Role.OWNER), globex.project, name="secret")
    upload_version(globex.client(Role.OWNER), theirs["id"], {"w.bin": b"secret bytes"})
    client = acme.client(Role.OWNER)
    for url in (
        models_url(theirs["id"]),
        models_url(theirs["id"], "versions"),
        models_url(theirs["id"], "versions", 1, "files", "w.bin"),
        models_url(theirs["id"], "versions", 1, "archive"),
        models_url(theirs["id"], "versions", 1, "lineage"),
        models_url(theirs["id"], "alias-history"),
        models_url(theirs["id"], "compare") + "?a=1&b=1",
    ):
        assert client.get(url).status_code == 404, url
    assert client.put(models_url(theirs["id"], "aliases", "x"), {"version": 1}).status_code == 404
    assert client.post(models_url(theirs["id"], "versions"), {}, format="json").status_code == 404
    response = client.post(reverse("model-list"), {"project": str(globex.project.pk), "name": "x"})
    assert response.status_code == 404
    assert client.get(reverse("model-list")).json()["results"] == []
    assert RegisteredModel.objects.count() == 1


def test_bad_input_is_a_400_naming_the_field(acme, models_area):
    client = acme.client(Role.MEMBER)
    response = client.post(reverse("model-list"), {"project": str(acme.project.pk), "name": "../x"})
    assert response.status_code == 400 and "name" in response.json()["error"]["fields"]
    model = create_model(client, acme.project)
    duplicate = client.post(
        reverse("model-list"), {"project": str(acme.project.pk), "name": "resnet"}
    )
    assert duplicate.status_code == 400
    cases = [
        ({"metrics": {"acc": "high"}}, "metrics"),
        ({"metrics": {"bad name": 1}}, "metrics"),
        ({"params": {"lr": {"nested": 1}}}, "params"),
        ({"dataset_versions": ["nope:1"]}, "dataset_versions"),
        ({"path": "/etc"}, "path"),
        ({"path": "relative/dir"}, "path"),
        ({"path": f"{models_area}/../../../../etc"}, "path"),
        ({"unknown": 1}, "unknown"),
    ]
    for body, field in cases:
        response = client.post(models_url(model["id"], "versions"), body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert field in response.json()["error"]["fields"], (body, response.json())
    assert not ModelVersion.objects.exists()


def test_the_worker_makes_the_models_area_on_first_need(acme, celery_worker):
    """The web process cannot make directories in the tenant tree: a worker does, once."""
    import pwd

    from django.conf import settings

    from apps.identity.storage import project_root

    area = project_root(acme.project) / "models"
    assert not area.exists()
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    version = upload_version(client, model["id"], {"w.bin": b"first"})
    assert version["state"] == "ready"
    info = area.stat()
    assert pwd.getpwuid(info.st_uid).pw_name == settings.TORUS_SERVICE_USER
    assert oct(info.st_mode & 0o7777) == "0o2750"


def test_a_page_of_versions_costs_the_same_queries_however_many(acme, models_area):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)

    def listing_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(models_url(model["id"], "versions"))
        assert response.status_code == 200
        return len(queries)

    upload_version(client, model["id"], {"w": b"1"}, metrics={"acc": 1.0}, card="# big card")
    client.put(models_url(model["id"], "aliases", "production"), {"version": 1}, format="json")
    few = listing_queries()
    for i in range(4):
        upload_version(client, model["id"], {"w": bytes([i])}, dataset_versions=[])
    assert listing_queries() == few

    rows = client.get(models_url(model["id"], "versions")).json()["results"]
    assert [r["number"] for r in rows] == [5, 4, 3, 2, 1] and rows[-1]["aliases"] == ["production"]
    assert "card" not in rows[0] and "metrics" not in rows[0]  # the detail has them
    full = client.get(models_url(model["id"], "versions") + "?full=1").json()["results"]
    assert full[-1]["metrics"] == {"acc": 1.0} and full[-1]["card"] == "# big card"
    detail = client.get(models_url(model["id"], "versions", 1)).json()
    assert detail["card"] == "# big card" and detail["aliases"] == ["production"]


def test_a_page_of_versions_reads_as_each_version_does(acme, models_area):
    """The page's rows are written by PostgreSQL (apps/core/api/json_rows.py): each reads
    exactly as the version's own route writes it, times included (UTC, 'Z', no fraction when
    it is zero), an open version's null fields and a lineage's ids too; an indented answer
    carries the same values."""
    import datetime

    from apps.datasets.models import Dataset, DatasetVersion

    dataset = Dataset.objects.create(tenant=acme.tenant, project=acme.project, name="imagenet")
    data = DatasetVersion.objects.create(dataset=dataset, number=1, state="committed")
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    upload_version(
        client, model["id"], {"w": b"1"}, metrics={"acc": 0.5}, tags={"team": "nlp"},
        card="# card", dataset_versions=["imagenet:1"],
    )  # fmt: skip
    upload_version(client, model["id"], {"w": b"2"})
    client.put(models_url(model["id"], "aliases", "production"), {"version": 1}, format="json")
    client.put(models_url(model["id"], "aliases", "staging"), {"version": 1}, format="json")
    client.post(models_url(model["id"], "versions"), {}, format="json")  # 3: open, no files
    whole_second = datetime.datetime(2026, 12, 4, 10, 0, 0, tzinfo=datetime.UTC)
    ModelVersion.objects.filter(model_id=model["id"], number=2).update(ready_at=whole_second)

    for query in ("", "?full=1"):
        rows = client.get(models_url(model["id"], "versions") + query).json()["results"]
        assert [r["number"] for r in rows] == [3, 2, 1]
        for row in rows:
            detail = client.get(models_url(model["id"], "versions", row["number"])).json()
            if not query:
                for heavy in ("card", "metrics", "params"):
                    detail.pop(heavy)
            assert row == detail
    assert rows[1]["ready_at"] == "2026-12-04T10:00:00Z" and rows[0]["ready_at"] is None
    assert rows[2]["aliases"] == ["production", "staging"]
    assert rows[2]["dataset_versions"] == [str(data.pk)]
    indented = client.get(
        models_url(model["id"], "versions") + "?full=1", HTTP_ACCEPT="application/json; indent=2"
    )
    assert indented.content.startswith(b"{\n") and indented.json()["results"] == rows

    # page by page, newest first whatever ?ordering= says (that is the models' parameter)
    url = models_url(model["id"], "versions") + "?page_size=2&ordering=name"
    first = client.get(url).json()
    second = client.get(first["next"]).json()
    assert [r["number"] for r in first["results"] + second["results"]] == [3, 2, 1]
    assert second["next"] is None and client.get(second["previous"]).json() == first


def test_an_alias_move_reads_each_row_by_its_key_alone(acme, models_area):
    """The baseline of a member's move: the model, the member's place in its project (once,
    though the view and the service both ask), the version, then one statement that locks
    the alias, moves it and writes the audit row (no BEGIN/COMMIT: the tenant has no
    webhook to tell); no read joins the tables that the version's and the alias's default
    orderings go through (model, project, tenant) to sort one row."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    for i in range(2):
        upload_version(client, model["id"], {"w": bytes([i])})
    url = models_url(model["id"], "aliases", "production")
    assert client.put(url, {"version": 1}, format="json").status_code == 200
    with CaptureQueriesContext(connection) as queries:
        response = client.put(url, {"version": 2}, format="json")
    assert response.status_code == 200 and response.json()["version"] == 2
    statements = [q["sql"] for q in queries if "SAVEPOINT" not in q["sql"]]  # the test's atomic
    tables = [
        "registry_registeredmodel",
        "tenancy_projectmember",
        "registry_modelversion",
        "registry_modelalias",
    ]
    assert len(statements) == len(tables), "\n".join(s[:90] for s in statements)
    for sql, table in zip(statements, tables, strict=True):
        assert table in sql.split(" WHERE ")[0], sql
    version_read, move = statements[2], statements[3]
    assert "FOR UPDATE" in move and 'INSERT INTO "tenancy_auditevent"' in move
    for sql in (version_read, move):
        assert "ORDER BY" not in sql and "tenancy_tenant" not in sql, sql


def test_a_small_version_in_one_request(acme, models_area):
    import json

    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    metadata = {"framework": "onnx", "metrics": {"acc": 0.7}, "params": {"lr": "0.1"}}
    response = client.post(
        models_url(model["id"], "versions"),
        {
            "metadata": json.dumps(metadata),
            "file/model.onnx": io.BytesIO(b"onnx bytes"),
            "file/conf/labels.txt": io.BytesIO(b"cat\ndog\n"),
        },
        format="multipart",
    )
    assert response.status_code == 201, response.content
    version = response.json()
    assert (version["state"], version["file_count"], version["framework"]) == ("ready", 2, "onnx")
    assert version["metrics"] == {"acc": 0.7}
    files = client.get(models_url(model["id"], "versions", 1, "files")).json()
    assert {f["path"]: f["sha256"] for f in files} == {
        "conf/labels.txt": hashlib.sha256(b"cat\ndog\n").hexdigest(),
        "model.onnx": hashlib.sha256(b"onnx bytes").hexdigest(),
    }
    for bad in ({"file/../x": io.BytesIO(b"x")}, {}, {"file/a": io.BytesIO(b"a"), "metadata": "{"}):
        response = client.post(models_url(model["id"], "versions"), bad, format="multipart")
        assert response.status_code == 400, (bad, response.content)
    assert ModelVersion.objects.count() == 1
    viewer = acme.client(Role.VIEWER)
    response = viewer.post(
        models_url(model["id"], "versions"), {"file/a": io.BytesIO(b"a")}, format="multipart"
    )
    assert response.status_code == 403
