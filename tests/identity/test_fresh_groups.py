"""A new project never inherits an old one: a directory entry whose gid a retired row holds is
replaced with a fresh gid (beside an entry no row holds, adopted); a directory an older
project left at the project's path is refused, never taken over (beside the project's own)."""

import os
import uuid

import pytest

from apps.identity.models import PosixGroup
from apps.identity.posix_directory import directory
from apps.identity.services import group_ensure, group_retire
from apps.identity.storage import StorageError, project_root, project_tree_ensure
from tests.conftest import make_world
from tests.factories import ProjectFactory


@pytest.fixture
def world(db):
    return make_world(f"fg{uuid.uuid4().hex[:8]}")


def test_a_retired_gid_is_never_handed_to_a_new_project(world):
    old = group_ensure(tenant=world.tenant, project=world.project)
    name, old_gid = old.name, old.gid
    group_retire(group=old)
    assert directory().find_group(name) is None
    directory().add_group(name=name, gid=old_gid)  # the entry put back beside the platform
    new_project = ProjectFactory(tenant=world.tenant, slug="again")
    new_project.slug = world.project.slug  # the name the retired group had
    world.project.delete()
    new_project.save()
    new = group_ensure(tenant=world.tenant, project=new_project)
    assert new.name == name and new.gid != old_gid
    assert directory().find_group(name).number == new.gid
    assert PosixGroup.objects.get(gid=old_gid).name == f"r-{old_gid}"
    # the control: an entry no row holds (a database made afresh) is adopted as it is
    other = ProjectFactory(tenant=world.tenant, slug="other")
    free_gid = new.gid + 1000
    directory().add_group(name=f"p-{world.tenant.slug}_other", gid=free_gid)
    assert group_ensure(tenant=world.tenant, project=other).gid == free_gid


def test_an_older_projects_directory_is_refused_never_taken_over(world, _job_root):
    tenant_gid = group_ensure(tenant=world.tenant).gid
    group = group_ensure(tenant=world.tenant, project=world.project)
    path = project_root(world.project)
    path.mkdir(parents=True)
    (path / "checkpoint.pt").write_text("old weights")
    os.chown(path.parent, 0, tenant_gid)
    os.chown(path, 0, group.gid + 1)  # an older project's group
    with pytest.raises(StorageError, match="an older project's directory is still at"):
        project_tree_ensure(project=world.project, tenant_gid=tenant_gid, project_gid=group.gid)
    assert os.stat(path).st_gid == group.gid + 1 and (path / "checkpoint.pt").exists()
    # the control: the project's own directory is used
    os.chown(path, 0, group.gid)
    project_tree_ensure(project=world.project, tenant_gid=tenant_gid, project_gid=group.gid)
    assert (path / "jobs").is_dir()
