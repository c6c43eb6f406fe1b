"""Registration from a path of the tree (apps/registry/trees.py) reads it through the one
reader of tenants' trees (apps/identity/tree.py): a link as a PARENT of the path, whether there
when the API checks it or swapped in before the worker copies, fails the registration naming
the link and copies nothing; the same directory reached without a link registers (control)."""

import os

import pytest

from apps.identity.storage import project_root
from apps.registry.models import ModelVersion
from apps.registry.trees import version_import
from apps.tenancy.models import Role
from tests import tenant_tree
from tests.registry.test_api import create_model, models_url

JOB_UID = 250020


def as_job(script: str, cwd) -> None:
    tenant_tree.as_job(script, cwd, uid=JOB_UID)


@pytest.fixture
def job_dir(acme, globex, models_area, globex_area):
    """A job directory of acme's, its user's, holding a model; globex's model beside it."""
    path = project_root(acme.project) / "jobs" / "j1"
    path.mkdir(parents=True)
    os.chown(path, JOB_UID, JOB_UID)
    as_job("mkdir -p out/model && echo weights > out/model/w.bin", path)
    theirs = project_root(globex.project) / "jobs" / "j9" / "model"
    theirs.mkdir(parents=True)
    (theirs / "w.bin").write_bytes(b"globex weights")
    return path


def register(acme, path, name: str):
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project, name=name)
    return client.post(models_url(model["id"], "versions"), {"path": str(path)}, format="json")


@pytest.mark.django_db
def test_a_linked_parent_is_refused_when_the_path_is_given(acme, globex, job_dir):
    as_job(f"ln -s / x && ln -s {project_root(globex.project)}/jobs/j9 theirs", job_dir)
    cases = [(job_dir / "x" / "etc" / "ssh", "x"), (job_dir / "theirs" / "model", "theirs")]
    for path, link in cases:
        response = register(acme, path, name=link)
        assert response.status_code == 400, response.content
        [message] = response.json()["error"]["fields"]["path"]
        assert f"{job_dir / link} is a symbolic link" in message
    assert not ModelVersion.objects.exists()


@pytest.mark.django_db
def test_a_parent_swapped_for_a_link_before_the_copy_copies_nothing(acme, globex, job_dir):
    response = register(
        acme, job_dir / "out" / "model", name="swapped"
    )  # real directories when the API looks
    assert response.status_code == 201, response.content
    # the job swaps the parent out/ for a link to the other tenant's job before the copy
    target = project_root(globex.project) / "jobs" / "j9"
    as_job(f"mv out out.real && ln -s {target} out", job_dir)
    version = version_import(version_id=response.json()["id"])
    assert version.state == "failed"
    assert f"{job_dir / 'out'} is a symbolic link" in version.error
    assert not version.files.exists()
    area = project_root(acme.project) / "models"
    assert not [p for p in area.rglob("*") if p.is_file()]
    # control: the real directory, reached without a link, registers
    response = register(acme, job_dir / "out.real" / "model", name="real")
    version = version_import(version_id=response.json()["id"])
    assert version.state == "ready", version.error
    assert [(f.path, f.size) for f in version.files.all()] == [("w.bin", 8)]
    assert (area / str(version.model_id) / "v1" / "w.bin").read_bytes() == b"weights\n"
