"""Cluster identities on the real directory (slapd through this machine's NSS) and as local
accounts: numbers never reused, names that cannot be trusted replaced, memberships that end."""

import grp
import pwd
import subprocess
import uuid
from io import StringIO
from pathlib import Path

import ldap
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from apps.identity.models import IdCounter, PosixAccount, PosixGroup
from apps.identity.posix_directory import directory
from apps.identity.services import (
    _allocate,
    account_ensure,
    group_ensure,
    group_members_add,
    member_remove,
    user_resolves,
)
from apps.tenancy.models import Role
from apps.tenancy.services import token_create
from tests.conftest import bearer_client
from tests.factories import MembershipFactory, ProjectFactory, TenantFactory, UserFactory
from tests.jobs.conftest import drive, output, submit

pytestmark = pytest.mark.django_db


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def test_a_new_person_gets_a_fresh_uid_and_private_group_that_nodes_resolve():
    user = UserFactory(username=unique("ada"), first_name="Ada", last_name="Lovelace")
    account = account_ensure(user=user)
    low, high = settings.TORUS_UID_RANGE
    assert low <= account.uid <= high
    entry = pwd.getpwnam(account.name)  # through nslcd, as slurmd resolves it
    assert (entry.pw_uid, entry.pw_gid, entry.pw_gecos) == (
        account.uid,
        account.gid,
        "Ada Lovelace",
    )
    assert grp.getgrgid(account.gid).gr_name == account.name
    assert user_resolves(name=account.name, uid=account.uid)
    assert account_ensure(user=user) == account  # idempotent


def test_numbers_are_never_handed_out_twice():
    seen = {_allocate("uid") for _ in range(5)}
    assert len(seen) == 5
    counter = IdCounter.objects.get(name="uid")
    # a number something else on the machine already holds is skipped, not reused
    taken = counter.next_value
    name = unique("squat")
    subprocess.run(["useradd", "--uid", str(taken), "--no-create-home", name], check=True)
    try:
        assert _allocate("uid") > taken
    finally:
        subprocess.run(["userdel", name], check=True)
    # a fresh database over the same directory starts above the directory's highest uid
    highest = directory().highest("uid", low=settings.TORUS_UID_RANGE[0], high=10**9)
    IdCounter.objects.all().delete()
    assert _allocate("uid") > highest


@pytest.mark.parametrize("username", ["root", "daemon", "Ada.Lovelace@example.org", "x" * 40])
def test_a_username_the_cluster_cannot_trust_gets_a_generated_name(username):
    account = account_ensure(user=UserFactory(username=username))
    assert account.name == f"u{account.uid}"
    assert pwd.getpwnam(account.name).pw_uid == account.uid
    assert not user_resolves(name="root", uid=0)


def test_seed_demo_puts_the_demo_people_in_the_directory_with_hashed_passwords():
    call_command("seed_demo", "--json", stdout=StringIO())
    account = PosixAccount.objects.get(user__username="acme-member")
    assert pwd.getpwnam("acme-member").pw_uid == account.uid
    conn = ldap.initialize(settings.TORUS_LDAP_URL)
    people = f"ou=people,{settings.TORUS_LDAP_BASE_DN}"
    conn.simple_bind_s(f"uid=acme-member,{people}", "torus-demo-pass")  # signs in
    admin = ldap.initialize(settings.TORUS_LDAP_URL)
    password = Path(settings.TORUS_LDAP_BIND_PASSWORD_FILE).read_text().strip()
    admin.simple_bind_s(settings.TORUS_LDAP_BIND_DN, password)
    [(_, attrs)] = admin.search_s(
        people, ldap.SCOPE_ONELEVEL, "(uid=acme-member)", ["userPassword"]
    )
    assert attrs["userPassword"][0].startswith(b"{SSHA}")
    # anonymous readers (nslcd) never see password hashes
    anonymous = ldap.initialize(settings.TORUS_LDAP_URL)
    [(_, seen)] = anonymous.search_s(people, ldap.SCOPE_ONELEVEL, "(uid=acme-member)")
    assert "userPassword" not in seen and seen["uidNumber"] == [str(account.uid).encode()]


def test_leaving_a_tenant_takes_the_person_out_of_its_groups():
    tenant = TenantFactory(slug=unique("t"))
    project = ProjectFactory(tenant=tenant, slug="p")
    membership = MembershipFactory(tenant=tenant, user=UserFactory(username=unique("bob")))
    account = account_ensure(user=membership.user)
    groups = [group_ensure(tenant=tenant), group_ensure(tenant=tenant, project=project)]
    for group in groups:
        group_members_add(group=group, names=[account.name])
        assert account.name in grp.getgrgid(group.gid).gr_mem
    member_remove(tenant=tenant, user=membership.user)
    for group in PosixGroup.objects.filter(tenant=tenant):
        assert account.name not in group.members
        assert account.name not in grp.getgrgid(group.gid).gr_mem


def test_directory_sync_puts_back_members_the_directory_lost():
    tenant = TenantFactory(slug=unique("t"))
    account = account_ensure(user=UserFactory(username=unique("eve")))
    group = group_ensure(tenant=tenant)
    group_members_add(group=group, names=[account.name])
    directory().set_members(name=group.name, members=[])  # edited beside the platform
    assert account.name not in grp.getgrgid(group.gid).gr_mem
    out = StringIO()
    call_command("directory_sync", stdout=out)
    assert group.name in out.getvalue().split()
    assert directory().find_group(group.name).members == (account.name,)
    assert account.name in grp.getgrgid(group.gid).gr_mem  # as slurmd resolves it
    out = StringIO()
    call_command("directory_sync", stdout=out)
    assert group.name not in out.getvalue().split()  # nothing differs now


def test_directory_sync_refuses_a_group_whose_number_differs():
    group = group_ensure(tenant=TenantFactory(slug=unique("t")))
    PosixGroup.objects.filter(pk=group.pk).update(gid=group.gid + 1)
    with pytest.raises(
        CommandError, match=f"group {group.name} has gid {group.gid} in the directory"
    ):
        call_command("directory_sync")


def test_group_names_cannot_collide_across_tenants_and_projects():
    a = group_ensure(tenant=(t := TenantFactory(slug=unique("acme"))),
                     project=ProjectFactory(tenant=t, slug="x-y"))  # fmt: skip
    b = group_ensure(tenant=(u := TenantFactory(slug=f"{t.slug}-x")),
                     project=ProjectFactory(tenant=u, slug="y"))  # fmt: skip
    assert a.name != b.name and a.gid != b.gid
    long = group_ensure(tenant=TenantFactory(slug=unique("a" * 40)))
    assert len(long.name) <= 32 and grp.getgrnam(long.name).gr_gid == long.gid


@pytest.fixture
def local_accounts(settings):
    """Identities as local accounts (a site without a directory); removed afterwards."""
    settings.TORUS_IDENTITY_BACKEND = "local"
    yield
    for account in PosixAccount.objects.all():
        subprocess.run(["userdel", account.name], capture_output=True)
    for group in PosixGroup.objects.all():
        subprocess.run(["groupdel", group.name], capture_output=True)
    for account in PosixAccount.objects.all():
        subprocess.run(["groupdel", account.name], capture_output=True)


@pytest.mark.django_db(transaction=True)
def test_without_a_directory_jobs_run_as_local_accounts_the_platform_creates(
    local_accounts, slurm_cluster
):
    tenant = TenantFactory(slug=unique("local"))
    project = ProjectFactory(tenant=tenant, slug="p")
    user = MembershipFactory(
        tenant=tenant, role=Role.ADMIN, user=UserFactory(username=unique("lo"))
    ).user

    _, token = token_create(actor=None, user=user, tenant=tenant, name="t")
    job = submit(bearer_client(token), project, command=["bash", "-c", "id -un; id -u"])
    finished = drive(job["id"])
    assert finished.state == "SUCCEEDED", finished.state_reason
    account = PosixAccount.objects.get(user=user)
    assert output(finished).split()[:2] == [account.name, str(account.uid)]
    # a local account, in /etc/passwd, not the directory
    assert any(
        line.startswith(f"{account.name}:") for line in Path("/etc/passwd").read_text().splitlines()
    )
    assert directory().find_user(account.name) is not None  # (local backend reads NSS)
    settings.TORUS_IDENTITY_BACKEND = "ldap"
    assert directory().find_user(account.name) is None


def test_removing_a_membership_through_the_api_ends_the_cluster_group_membership(acme):
    from django.urls import reverse

    member = acme.users[Role.MEMBER]
    account = account_ensure(user=member)
    groups = [
        group_ensure(tenant=acme.tenant),
        group_ensure(tenant=acme.tenant, project=acme.project),
    ]
    for group in groups:
        group_members_add(group=group, names=[account.name])
    membership = member.memberships.get(tenant=acme.tenant)
    response = acme.client(Role.ADMIN).delete(
        reverse("membership-detail", kwargs={"pk": membership.pk})
    )
    assert response.status_code == 204, response.content
    for group in groups:
        assert account.name not in grp.getgrgid(group.gid).gr_mem


def test_two_people_whose_names_differ_only_in_case_get_two_accounts():
    name = unique("carol")
    first = account_ensure(user=UserFactory(username=name))
    second = account_ensure(user=UserFactory(username=name.upper()))
    assert first.name == name and second.name == f"u{second.uid}"
    assert first.uid != second.uid and pwd.getpwnam(second.name).pw_uid == second.uid
