"""A person removed through tenancy's services leaves the cluster's groups too: identity does
that through the hook it registers in its ready() (tenancy, below identity, never imports it)."""

import grp
import uuid

import pytest

from apps.identity.models import PosixGroup
from apps.identity.services import account_ensure, group_ensure, group_members_add
from apps.tenancy.access import actor_for_user
from apps.tenancy.models import Role
from apps.tenancy.services import membership_delete, project_member_remove
from tests.factories import (
    MembershipFactory,
    ProjectFactory,
    ProjectMemberFactory,
    TenantFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def _world():
    tenant = TenantFactory(slug=f"t{uuid.uuid4().hex[:8]}")
    project = ProjectFactory(tenant=tenant, slug="p")
    owner = MembershipFactory(tenant=tenant, role=Role.OWNER).user
    person = MembershipFactory(tenant=tenant, user=UserFactory(username=f"u{uuid.uuid4().hex[:8]}"))
    account = account_ensure(user=person.user)
    for group in (group_ensure(tenant=tenant), group_ensure(tenant=tenant, project=project)):
        group_members_add(group=group, names=[account.name])
        assert account.name in grp.getgrgid(group.gid).gr_mem
    return tenant, project, actor_for_user(user=owner), person, account


def _in_groups(tenant, name: str) -> dict[str, bool]:
    return {
        group.name: name in group.members and name in grp.getgrgid(group.gid).gr_mem
        for group in PosixGroup.objects.filter(tenant=tenant)
    }


def test_a_person_removed_from_a_tenant_leaves_all_its_groups():
    tenant, _, actor, person, account = _world()
    membership_delete(actor=actor, membership=person)
    groups = _in_groups(tenant, account.name)
    assert len(groups) == 2 and not any(groups.values()), groups


def test_a_person_removed_from_a_project_leaves_only_its_group():
    tenant, project, actor, person, account = _world()
    member = ProjectMemberFactory(project=project, user=person.user)
    project_member_remove(actor=actor, member=member)
    groups = _in_groups(tenant, account.name)
    project_group = PosixGroup.objects.get(project=project).name
    assert groups == {name: name != project_group for name in groups}, groups
