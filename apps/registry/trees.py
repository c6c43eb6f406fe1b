"""A version copied in from a directory of the tenant's tree (e.g. a training job's output):
the source checked, the project's models/ area made, the worker's copy, manifest and seal."""

import os
from collections.abc import Iterable
from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.datasets.areas import project_storage_ensure, project_tree_make
from apps.identity import tree
from apps.identity.storage import project_root, tenant_root
from apps.registry.files import file_key, version_finish, version_storage
from apps.registry.models import ModelFile, ModelVersion, RegisteredModel, VersionState
from apps.registry.validation import MAX_FILES, file_path_problem
from apps.tenancy.audit import audit_record
from apps.tenancy.models import Project


def models_area_ensure(*, project: Project, in_worker: bool = False) -> None:
    """The project's models/ directory in its tree, made by a worker through the privileged
    helper when missing (the web process asks a worker and waits: apps/datasets/areas.py)."""
    if (project_root(project) / "models").is_dir():
        return
    if in_worker:
        project_tree_make(project_id=str(project.pk))
    else:
        project_storage_ensure(project=project)


# -- copying a directory of the tenant's tree in (the worker) ----------------------------------


def tree_source(*, model: RegisteredModel, path: str) -> Path:
    """The directory a version is copied from: absolute, no '.'/'..' parts, inside the model's
    project tree, no symlink on the way (a 400 otherwise). Where it cannot be opened yet
    (missing, not readable), the worker's copy says so later."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        raise ValidationError({"path": ["Must be an absolute path."]})
    if any(part in (".", "..") for part in path.split("/")):
        raise ValidationError({"path": ["Must not contain '.' or '..' parts."]})
    root = project_root(model.project)
    candidate = Path(path)
    if candidate != root and root not in candidate.parents:
        raise ValidationError({"path": [f"Must lie in the model's project directory ({root})."]})
    try:
        os.close(tree.open_under(tenant_root(model.project.tenant), candidate, directory=True))
    except tree.TreeRefused as exc:
        raise ValidationError({"path": [f"Must not pass through a symlink: {exc}."]}) from None
    except OSError:
        pass
    return candidate


def _path_problem(relative: str) -> str | None:
    problem = file_path_problem(relative)
    return f"cannot be a file of a version: {problem}" if problem else None


def _copy_tree(version: ModelVersion, source: Path) -> None:
    """Copy the regular files under `source` into the version's storage through the one
    reader of tenants' trees (apps/identity/tree.py): opened from the tenant's root with no
    link followed anywhere on the way or below; a link, or a file with other hard links,
    fails the whole registration naming it. Only what lies in the tree itself is copied,
    whatever the job wrote there."""
    storage = version_storage(version)
    root = tenant_root(version.model.project.tenant)
    try:
        top = tree.open_under(root, source, directory=True)
    except tree.TreeRefused as exc:
        raise ValidationError({"path": [f"{exc}; nothing was copied."]}) from None
    except FileNotFoundError:
        raise ValidationError({"path": [f"{source} does not exist."]}) from None
    except NotADirectoryError:
        raise ValidationError({"path": [f"{source} is not a directory."]}) from None
    except OSError as exc:
        raise ValidationError({"path": [f"{source}: cannot be read ({exc.strerror})."]}) from None

    def store(relative: str, chunks: Iterable[bytes]) -> None:
        key = file_key(version, relative)
        upload = storage.begin_upload(key=key)
        storage.append(key=key, upload_id=upload, offset=0, chunks=chunks)
        storage.finish_upload(key=key, upload_id=upload)

    try:
        copied = tree.copy_tree(top, store=store, max_files=MAX_FILES, path_problem=_path_problem)
    except tree.TreeRefused as exc:
        raise ValidationError({"path": [f"{exc}; nothing was copied."]}) from None
    except OSError as exc:
        raise ValidationError(
            {"path": [f"{exc.filename}: cannot be read ({exc.strerror})."]}
        ) from None
    finally:
        os.close(top)
    if not copied:
        raise ValidationError({"path": [f"{source} holds no files."]})
    ModelFile.objects.bulk_create(
        [
            ModelFile(version=version, path=row.relative, size=row.size, sha256=row.sha256)
            for row in copied
        ],
        batch_size=1000,
    )


def version_import(*, version_id) -> ModelVersion | None:
    """The worker's half of a registration from the tree: copy, manifest, seal, ready (or
    failed with the reason). Safe to run twice: only a pending version is copied."""
    with transaction.atomic():
        version = (
            ModelVersion.objects.select_for_update(of=("self",))
            .select_related("model__project__tenant", "created_by")
            .filter(pk=version_id)
            .first()
        )
        if version is None or version.state != VersionState.PENDING:
            return version
        models_area_ensure(project=version.model.project, in_worker=True)
        storage = version_storage(version)
        storage.delete(prefix=version.key_prefix)  # a copy cut short before
        version.files.all().delete()
        try:
            with transaction.atomic():
                _copy_tree(version, Path(version.source_path))
                return version_finish(version, actor=None, user=version.created_by)
        except ValidationError as exc:
            storage.delete(prefix=version.key_prefix)
            version.state = VersionState.FAILED
            version.error = "; ".join(exc.messages)[:2000]
            version.save(update_fields=["state", "error", "updated_at"])
            audit_record(
                actor=None,
                user=version.created_by,
                tenant_id=version.tenant_id,
                action="model_version.failed",
                target=version,
                changes={"error": version.error},
            )
            return version
