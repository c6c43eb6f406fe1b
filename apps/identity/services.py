"""Writes for cluster identities: a person's POSIX account, the tenant's and project's groups,
their members, and the Slurm associations that make a job accountable to its project.

Everything is made on first need (dispatch calls `job_identity`) and is idempotent: a row in
PostgreSQL means the directory has the entry. Entries found in the directory under the same
name are adopted with their numbers (people who sign in from an existing directory; a test
database made afresh over the same directory).
"""

import grp
import hashlib
import pwd
import re
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction

from apps.core.exceptions import DirectoryUnavailable
from apps.identity.models import ClusterAssociation, GroupKind, IdCounter, PosixAccount, PosixGroup
from apps.identity.posix_directory import directory
from apps.tenancy.models import Project, Tenant

POSIX_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


class IdentityError(Exception):
    """An identity cannot be made or trusted (a name taken by a local account, a user who
    does not resolve to their uid on the cluster). Nothing was submitted."""


@dataclass(frozen=True)
class JobIdentity:
    """Who a job runs as on the cluster."""

    user: str
    uid: int
    gid: int  # the project's group
    tenant_gid: int
    account: str  # the project's account on the cluster (its group's name)


def _allocate(kind: str) -> int:
    """The next free uid or gid of the configured range, never one handed out before: the
    counter only moves up, starts above anything the directory already holds, and skips any
    number the machine's NSS already knows."""
    low, high = settings.TORUS_UID_RANGE if kind == "uid" else settings.TORUS_GID_RANGE
    with transaction.atomic():
        counter = IdCounter.objects.select_for_update().filter(name=kind).first()
        if counter is None:
            seen = directory().highest(kind, low=low, high=high)
            try:
                with transaction.atomic():
                    IdCounter.objects.create(name=kind, next_value=max(low, (seen or 0) + 1))
            except IntegrityError:
                pass  # created meanwhile by another process
            counter = IdCounter.objects.select_for_update().get(name=kind)
        number = counter.next_value
        while _number_known(kind, number):
            number += 1
        if number > high:
            raise IdentityError(f"the {kind} range {low}-{high} is used up")
        counter.next_value = number + 1
        counter.save(update_fields=["next_value"])
    return number


def _number_known(kind: str, number: int) -> bool:
    try:
        (pwd.getpwuid if kind == "uid" else grp.getgrgid)(number)
    except KeyError:
        return False
    return True


def _check_name(name: str) -> None:
    if not POSIX_NAME_RE.match(name):
        raise IdentityError(f"{name!r} is not a valid POSIX name")


def account_ensure(*, user, password: str | None = None) -> PosixAccount:
    """The person's POSIX account, made (or adopted from the directory) on first need. A
    username that is not a valid POSIX name, or that a local account of this machine already
    has (root, daemon, ...), gets the name u<uid> instead."""
    account = PosixAccount.objects.filter(user=user).first()
    if account is not None:
        if password:
            directory().set_password(name=account.name, password=password)
        return account
    name = user.username.lower()
    found = directory().find_user(name) if POSIX_NAME_RE.match(name) else None
    low, high = settings.TORUS_UID_RANGE
    # someone else's already ("Alice" and "alice" are two people to Django): never shared
    adoptable = not PosixAccount.objects.filter(name=name).exists()
    if found is not None and low <= found.number <= high and adoptable:
        group = directory().find_group(name)
        account = PosixAccount(
            user=user, name=name, uid=found.number, gid=group.number if group else found.number
        )
        if password:
            directory().set_password(name=name, password=password)
    else:
        uid, gid = _allocate("uid"), _allocate("gid")
        if found is not None or not POSIX_NAME_RE.match(name) or _name_taken(name):
            name = f"u{uid}"
        directory().add_user(
            name=name,
            uid=uid,
            gid=gid,
            full_name=user.get_full_name(),
            email=user.email,
            password=password,
        )
        account = PosixAccount(user=user, name=name, uid=uid, gid=gid)
    try:
        with transaction.atomic():
            account.save()
    except IntegrityError:  # made meanwhile by another dispatcher
        existing = PosixAccount.objects.filter(user=user).first()
        if existing is None:
            raise IdentityError(f"could not record the account {name}; try again") from None
        return existing
    return account


def _name_taken(name: str) -> bool:
    for lookup in (pwd.getpwnam, grp.getgrnam):
        try:
            lookup(name)
        except KeyError:
            continue
        return True
    return False


def group_name(*, tenant: Tenant, project: Project | None = None) -> str:
    """t-<tenant> and p-<tenant>_<project> (slugs hold no '_', so no two collide); a name
    longer than POSIX allows is shortened with a hash of the slugs."""
    name = f"p-{tenant.slug}_{project.slug}" if project else f"t-{tenant.slug}"
    if len(name) <= 32:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:23]}-{digest}"


RETIRED_PREFIX = "r-"  # a retired group's row: r-<gid> (t- and p- names never start so)


def group_ensure(*, tenant: Tenant, project: Project | None = None) -> PosixGroup:
    """The tenant's (project=None) or the project's group.

    A group is never inherited: a row of the same name left without its project or tenant
    (an older one's, orphaned) is retired first, which removes its directory entry; a
    directory entry whose gid a row of this platform holds (retired, or another group's) is
    replaced with a fresh gid. An entry whose gid no row holds is adopted with its number (a
    database made afresh over the same directory: rows are never deleted, so no purge left
    it; and a new gid under a cached name would keep its members' jobs out until the
    clusters' group caches expire)."""
    kind = GroupKind.PROJECT if project else GroupKind.TENANT
    lookup = {"project": project} if project else {"tenant": tenant, "kind": kind}
    group = PosixGroup.objects.filter(**lookup).first()
    if group is not None:
        return group
    name = group_name(tenant=tenant, project=project)
    _check_name(name)
    stale = PosixGroup.objects.filter(name=name).first()
    if stale is not None:
        group_retire(group=stale)
    found = directory().find_group(name)
    if found is not None and not PosixGroup.objects.filter(gid=found.number).exists():
        gid = found.number
    else:
        if found is not None:  # never handed over: its gid may still own an older one's files
            directory().remove_group(name=name)
        gid = _allocate("gid")
        directory().add_group(name=name, gid=gid)
    group = PosixGroup(kind=kind, tenant=tenant, project=project, name=name, gid=gid)
    try:
        with transaction.atomic():
            group.save()
    except IntegrityError:
        return PosixGroup.objects.get(**lookup)
    return group


def group_retire(*, group: PosixGroup) -> PosixGroup:
    """Take a group out of use for good (a purged project or tenant, a row orphaned by an old
    cascade): its directory entry removed, the row kept under the name r-<gid> so its gid is
    never handed out again and its old name is free. Idempotent."""
    retired = f"{RETIRED_PREFIX}{group.gid}"
    if group.name == retired and group.project_id is None and group.tenant_id is None:
        return group
    found = directory().find_group(group.name)
    if found is not None and found.number == group.gid:
        directory().remove_group(name=group.name)
    with transaction.atomic():
        locked = PosixGroup.objects.select_for_update().get(pk=group.pk)
        locked.name, locked.project, locked.tenant, locked.members = retired, None, None, []
        locked.save(update_fields=["name", "project", "tenant", "members", "updated_at"])
    return locked


def group_members_add(*, group: PosixGroup, names: list[str]) -> None:
    if set(names) <= set(group.members):
        return
    with transaction.atomic():
        group = PosixGroup.objects.select_for_update().get(pk=group.pk)
        missing = set(names) - set(group.members)
        if not missing:
            return
        members = sorted(set(group.members) | missing)
        directory().set_members(name=group.name, members=members)
        group.members = members
        group.save(update_fields=["members", "updated_at"])


def directory_sync() -> list[str]:
    """Write every group the platform records into the directory again, with its members: the
    platform's record is the truth, and a directory edited beside it (an operator's tool, a
    restore, another deployment sharing it) would otherwise keep jobs out of their files until
    membership next changes. Returns the names of the groups that differed."""
    changed = []
    for group in PosixGroup.objects.exclude(name__startswith=RETIRED_PREFIX).order_by("gid"):
        found = directory().find_group(group.name)
        if found is None:
            directory().add_group(name=group.name, gid=group.gid)
        elif found.number != group.gid:
            raise IdentityError(
                f"group {group.name} has gid {found.number} in the directory, {group.gid} here"
            )
        if found is None or sorted(found.members) != sorted(group.members):
            directory().set_members(name=group.name, members=group.members)
            changed.append(group.name)
    return changed


def member_remove(*, tenant: Tenant, user, project: Project | None = None) -> None:
    """A person leaves a tenant (out of its group and every one of its projects' groups) or
    one project (out of that project's group), so their jobs started from now on cannot
    reach those files. Called inside the caller's transaction: if the directory cannot be
    written, nothing of the removal is kept."""
    account = PosixAccount.objects.filter(user=user).first()
    if account is None:
        return
    groups = PosixGroup.objects.filter(project=project) if project else tenant.posix_groups
    with transaction.atomic():
        for group in groups.select_for_update():
            if account.name in group.members:
                group.members = [m for m in group.members if m != account.name]
                directory().set_members(name=group.name, members=group.members)
                group.save(update_fields=["members", "updated_at"])


def user_resolves(*, name: str, uid: int) -> bool:
    """The cluster's NSS maps the name to exactly this uid, inside the platform's range.
    (A job submitted for a name that does not resolve would run as 'nobody' or, for a name a
    local account holds, as that account.)"""
    low, high = settings.TORUS_UID_RANGE
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return False
    return entry.pw_uid == uid and low <= uid <= high


def job_identity(*, job, backend, cluster) -> JobIdentity:
    """Everything a job needs to run as its submitter in its project: the account, the
    tenant's and project's groups with the person in both, and the cluster association.
    Raises DirectoryUnavailable (try later) or IdentityError (the job cannot run)."""
    account = account_ensure(user=job.user)
    tenant_group = group_ensure(tenant=job.tenant)
    project_group = group_ensure(tenant=job.tenant, project=job.project)
    group_members_add(group=tenant_group, names=[account.name])
    group_members_add(group=project_group, names=[account.name])
    if not user_resolves(name=account.name, uid=account.uid):
        raise DirectoryUnavailable(
            f"user {account.name} does not resolve to uid {account.uid} on the cluster yet"
        )
    if not ClusterAssociation.objects.filter(
        cluster=cluster, account=project_group.name, user=account.name
    ).exists():
        backend.ensure_association(
            user=account.name, account=project_group.name, parent=tenant_group.name
        )
        ClusterAssociation.objects.get_or_create(
            cluster=cluster, account=project_group.name, user=account.name
        )
    return JobIdentity(
        user=account.name,
        uid=account.uid,
        gid=project_group.gid,
        tenant_gid=tenant_group.gid,
        account=project_group.name,
    )


def association_forget(*, cluster, user: str, account: str) -> None:
    """The cluster lost the association the platform made (AssociationMissing): the next
    job_identity makes it again."""
    ClusterAssociation.objects.filter(cluster=cluster, account=account, user=user).delete()
