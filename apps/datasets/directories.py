"""A directory of the project's tree registered into an open dataset version: walked and
copied through the one reader of tenants' trees (apps/identity/tree.py), hashed as it
streams, the quota checked first."""

import os

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.actor import Actor
from apps.datasets.manifest import check_no_clash, check_open, file_record, tenant_project
from apps.datasets.models import DatasetVersion
from apps.datasets.paths import file_path_problem, source_dir_problem
from apps.datasets.storage import storage_for
from apps.datasets.versions import audit
from apps.identity import tree
from apps.identity.storage import tenant_root
from apps.quotas.services import storage_admit


def walk_regular_files(top_fd: int) -> list[tuple[str, int]]:
    """(relative path, size) of the regular files below the open directory `top_fd`, walked
    by the one reader of tenants' trees (apps/identity/tree.py): a symlink, a special file,
    a file with other hard links or a name a version cannot hold is refused, naming it."""
    found = []
    try:
        for entry in tree.walk_files(top_fd, links="refuse", special="refuse"):
            if entry.nlink > 1:  # a hard link may name a file from anywhere
                raise ValidationError(
                    {"path": [f"{entry.relative} has other hard links; copy it first."]}
                )
            problem = file_path_problem(entry.relative)
            if problem:
                raise ValidationError({"path": [f"{entry.relative}: {problem}"]})
            found.append((entry.relative, entry.size))
    except tree.TreeRefused as exc:
        raise ValidationError({"path": [f"{exc}."]}) from None
    except OSError as exc:
        raise ValidationError(
            {"path": [f"{exc.filename}: cannot be read ({exc.strerror})."]}
        ) from None
    return sorted(found)


def _open_file(top_fd: int, relative: str) -> int:
    """One listed file, opened again below `top_fd` with no link followed: changed into a link
    or hard-linked since the listing, it is refused."""
    try:
        fd = tree.open_beneath(top_fd, relative)
    except OSError as exc:
        raise ValidationError({"path": [f"{relative}: {exc.strerror or exc}."]}) from None
    if os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise ValidationError({"path": [f"{relative} has other hard links; copy it first."]})
    return fd


def version_register_directory(
    *, actor: Actor | None, version: DatasetVersion, path: str
) -> DatasetVersion:
    """Copy the files of a directory in the project's tree into an open version, hashing
    them as they stream. The directory must lie inside the project's tree, and is opened from
    the tenant's root with no link followed on the way or below it (apps/identity/tree.py)."""
    dataset = version.dataset
    problem = source_dir_problem(path, project=dataset.project)
    if problem:
        raise ValidationError({"path": [problem]})
    try:
        top_fd = tree.open_under(tenant_root(dataset.project.tenant), path, directory=True)
    except tree.TreeRefused as exc:
        raise ValidationError({"path": [f"{exc}."]}) from None
    except OSError as exc:
        raise ValidationError({"path": [f"Cannot be opened ({exc.strerror})."]}) from None
    try:
        files = walk_regular_files(top_fd)
        tenant_id, project_id = tenant_project(version)
        with transaction.atomic():
            locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
            check_open(locked)
            for relative, _size in files:
                check_no_clash(locked, relative)
            storage_admit(
                tenant_id=tenant_id, project_id=project_id, add_bytes=sum(s for _, s in files)
            )
        storage = storage_for(version.storage_kind)
        for relative, _size in files:
            key = version.file_key(relative)
            fd = _open_file(top_fd, relative)
            upload_id = storage.begin_upload(key=key)
            try:
                try:
                    hashed = tree.HashedChunks(fd, name=relative)
                    storage.append(key=key, upload_id=upload_id, offset=0, chunks=hashed)
                finally:
                    os.close(fd)
                with transaction.atomic():
                    locked = DatasetVersion.objects.select_for_update().get(pk=version.pk)
                    check_open(locked)
                    storage.finish_upload(key=key, upload_id=upload_id)
                    file_record(locked, path=relative, size=hashed.size, sha256=hashed.hexdigest)
            except BaseException:
                storage.abort_upload(key=key, upload_id=upload_id)
                raise
    finally:
        os.close(top_fd)
    audit(
        actor,
        tenant_id=dataset.tenant_id,
        action="dataset.version.register",
        target=version,
        changes={"path": [None, path], "files": [None, len(files)]},
    )
    version.refresh_from_db()
    return version
