"""Writes for the model registry: models, versions (uploaded through the API or copied from
the tenant's tree, e.g. a training job's output), aliases, stages, webhooks and deliveries.

Functions taking an `actor` authorise at their boundary (apps/tenancy/policies.py), as the
API layer does. A version's files go through the Storage interface (apps/datasets/storage);
once a version is ready its prefix is sealed and its manifest rows never change.
"""

import hashlib
import logging
import os
import re
import secrets
from collections.abc import Iterable
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.core.queries import unique_row
from apps.datasets.storage import storage_for
from apps.datasets.storage.base import CHUNK_BYTES, UploadOffsetMismatch, key_problem
from apps.identity import tree
from apps.identity.storage import project_root, tenant_root
from apps.registry import alias_point, webhooks
from apps.registry.models import (
    ALIAS_RE,
    NAME_RE,
    STAGE_MOVES,
    TAG_KEY_RE,
    DeliveryState,
    ModelAlias,
    ModelFile,
    ModelVersion,
    RegisteredModel,
    Stage,
    VersionState,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)
from apps.tenancy.audit import audit_event, audit_record
from apps.tenancy.models import Project
from apps.tenancy.policies import authorize

logger = logging.getLogger(__name__)

MAX_METRICS = 1000
MAX_PARAMS = 1000
MAX_CARD = 256 * 1024
MAX_FILES = 10_000
METRIC_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,99}$")


# -- validation (the domain checks what it is given, whoever calls) -----------------------------


def _name(value: str, *, field: str = "name") -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValidationError(
            {field: ["1-100 letters, digits, '.', '_' or '-', starting with a letter or digit."]}
        )
    return value


def _tags(value, *, field: str = "tags") -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > 50:
        raise ValidationError({field: ["An object of at most 50 tags."]})
    for key, item in value.items():
        if not TAG_KEY_RE.match(key) or not isinstance(item, str) or len(item) > 256:
            raise ValidationError(
                {field: [f"Tag {key[:64]!r}: keys of letters, digits, '._/-'; string values."]}
            )
    return dict(value)


def _metrics(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_METRICS:
        raise ValidationError({"metrics": [f"An object of at most {MAX_METRICS} numbers."]})
    for key, item in value.items():
        if not METRIC_NAME_RE.match(key):
            raise ValidationError({"metrics": [f"{key[:64]!r} is not a valid metric name."]})
        if isinstance(item, bool) or not isinstance(item, int | float) or item != item:
            raise ValidationError({"metrics": [f"{key}: must be a finite number."]})
        if item in (float("inf"), float("-inf")):
            raise ValidationError({"metrics": [f"{key}: must be a finite number."]})
    return dict(value)


def _params(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_PARAMS:
        raise ValidationError({"params": [f"An object of at most {MAX_PARAMS} parameters."]})
    out = {}
    for key, item in value.items():
        if not METRIC_NAME_RE.match(key):
            raise ValidationError({"params": [f"{key[:64]!r} is not a valid parameter name."]})
        if isinstance(item, dict | list) or item is None:
            raise ValidationError({"params": [f"{key}: give a string, number or boolean."]})
        text = item if isinstance(item, str) else str(item)
        if len(text) > 4096 or "\x00" in text:
            raise ValidationError({"params": [f"{key}: at most 4096 characters, no NUL."]})
        out[key] = text
    return out


def file_path_problem(path: str) -> str | None:
    """A file's path inside a version: relative, no '.'/'..'/empty parts, no control chars."""
    if not isinstance(path, str):
        return "Must be a string."
    if len(path) > 1000:
        return "At most 1000 characters."
    return key_problem(path)


def _alias(value: str) -> str:
    if not isinstance(value, str) or not ALIAS_RE.match(value) or value == "latest":
        raise ValidationError(
            {
                "alias": [
                    "1-40 lowercase letters, digits, '_' or '-', starting with a letter;"
                    " 'latest' is reserved."
                ]
            }
        )
    return value


def _storage(version: ModelVersion):
    return storage_for(version.storage)


def file_key(version: ModelVersion, path: str) -> str:
    return f"{version.key_prefix}/{path}"


# -- models -------------------------------------------------------------------------------------


def model_create(
    *, actor: Actor, project: Project, name: str, description: str = "", tags=None
) -> RegisteredModel:
    authorize(actor, resource="model", action="create", tenant_id=project.tenant_id, target=project)
    _name(name)
    tags = _tags(tags)
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(
                tenant_id=project.tenant_id,
                project=project,
                name=name,
                description=description,
                tags=tags,
                created_by=actor.user,
            )
            audit_record(
                actor=actor, tenant_id=project.tenant_id, action="model.create", target=model
            )
    except IntegrityError:
        raise ValidationError(
            {"name": [f"A model named {name!r} exists in this project."]}
        ) from None
    return model


def model_update(*, actor: Actor, model: RegisteredModel, **fields) -> RegisteredModel:
    authorize(actor, resource="model", action="update", tenant_id=model.tenant_id, target=model)
    return _describe(actor=actor, row=model, action="model.update", fields=fields, changes={})


def _describe(*, actor: Actor, row, action: str, fields: dict, changes: dict):
    """Set a model's or version's description and tags from `fields`, save, audit."""
    if "description" in fields:
        changes["description"] = [row.description, fields["description"]]
        row.description = fields["description"]
    if "tags" in fields:
        tags = _tags(fields["tags"])
        changes["tags"] = [row.tags, tags]
        row.tags = tags
    with transaction.atomic():
        row.save()
        audit_record(
            actor=actor, tenant_id=row.tenant_id, action=action, target=row, changes=changes
        )
    return row


def model_delete(*, actor: Actor, model: RegisteredModel) -> None:
    authorize(actor, resource="model", action="delete", tenant_id=model.tenant_id, target=model)
    prefixes = [
        (v.storage, v.key_prefix) for v in model.versions.select_related("model__project__tenant")
    ]
    with transaction.atomic():
        audit_record(actor=actor, tenant_id=model.tenant_id, action="model.delete", target=model)
        model.delete()
    for kind, prefix in prefixes:
        storage_for(kind).delete(prefix=prefix)


# -- versions -----------------------------------------------------------------------------------


def _dataset_versions(*, tenant_id, refs) -> list:
    """Dataset versions named by UUID or "<dataset>:<number>", in the same tenant (others are
    'not found', never told apart)."""
    from apps.datasets.models import DatasetVersion

    found = []
    for ref in refs or []:
        ref = str(ref)
        query = DatasetVersion.objects.filter(dataset__tenant_id=tenant_id)
        name, sep, number = ref.rpartition(":")
        try:
            if sep and number.isdigit():
                found.append(query.get(dataset__name=name, number=int(number)))
            else:
                found.append(query.get(pk=ref))
        except (
            DatasetVersion.DoesNotExist,
            DatasetVersion.MultipleObjectsReturned,
            ValueError,
            ValidationError,
        ):
            raise ValidationError(
                {"dataset_versions": [f"Dataset version {ref[:100]!r} not found."]}
            ) from None
    return found


def models_area_ensure(*, project: Project, in_worker: bool = False) -> None:
    """The project's models/ directory in its tree, made by a worker through the privileged
    helper when missing (the web process asks a worker and waits: apps/datasets/services.py)."""
    if (project_root(project) / "models").is_dir():
        return
    if in_worker:
        from apps.datasets.tasks import project_storage_ensure

        project_storage_ensure(str(project.pk))
    else:
        from apps.datasets.services import project_storage_ensure

        project_storage_ensure(project=project)


def _next_version(model: RegisteredModel, **fields) -> ModelVersion:
    locked = RegisteredModel.objects.select_for_update().get(pk=model.pk)
    locked.last_number += 1
    locked.save(update_fields=["last_number", "updated_at"])
    return ModelVersion.objects.create(model=locked, number=locked.last_number, **fields)


def version_create(
    *,
    actor: Actor,
    model: RegisteredModel,
    framework: str = "",
    description: str = "",
    card: str = "",
    metrics=None,
    params=None,
    tags=None,
    dataset_versions=None,
    source_attempt=None,
    source_path: str = "",
) -> ModelVersion:
    """A new version. Without `source_path` it is open for uploads (then `version_commit`);
    with one (a directory in the model's project tree) the worker copies it in."""
    authorize(
        actor, resource="model", action="create-version", tenant_id=model.tenant_id, target=model
    )
    if len(card) > MAX_CARD:
        raise ValidationError({"card": [f"At most {MAX_CARD} characters."]})
    if len(framework) > 64:
        raise ValidationError({"framework": ["At most 64 characters."]})
    fields = dict(
        framework=framework,
        description=description,
        card=card,
        metrics=_metrics(metrics),
        params=_params(params),
        tags=_tags(tags),
        created_by=actor.user,
    )
    datasets = _dataset_versions(tenant_id=model.tenant_id, refs=dataset_versions)
    if source_attempt is not None:
        if source_attempt.job.tenant_id != model.tenant_id:
            raise ValidationError({"source_attempt": ["Job attempt not found."]})
        fields.update(source_attempt=source_attempt, source_job=source_attempt.job)
    if source_path:
        _tree_source(model=model, path=source_path)  # a 400 now, before anything is written
        fields.update(source_path=source_path, state=VersionState.PENDING)
    models_area_ensure(project=model.project)
    with transaction.atomic():
        version = _next_version(model, **fields)
        if datasets:
            version.dataset_versions.set(datasets)
        audit_record(
            actor=actor, tenant_id=model.tenant_id, action="model_version.create", target=version
        )
        if source_path:
            _enqueue_import(version)
    return version


def _enqueue_import(version: ModelVersion) -> None:
    from apps.registry.tasks import import_version

    pk = str(version.pk)
    transaction.on_commit(lambda: import_version.delay(pk))


def version_upload(
    *, actor: Actor, version: ModelVersion, path: str, offset: int, chunks: Iterable[bytes]
) -> int:
    """Append bytes to one file of an open version at `offset` (which must be what is stored:
    a dropped upload resumes from the size a Conflict reports). Returns the stored size."""
    authorize(
        actor,
        resource="model",
        action="create-version",
        tenant_id=version.tenant_id,
        target=version.model,
    )
    problem = file_path_problem(path)
    if problem:
        raise ValidationError({"path": [problem]})
    if version.state != VersionState.OPEN:
        raise Conflict(
            f"Version {version.number} is {version.state}; files can no longer be added."
        )
    storage = _storage(version)
    key = file_key(version, path)
    with transaction.atomic():
        row = unique_row(ModelFile.objects.select_for_update().filter(version=version, path=path))
        if row is None:
            if version.files.count() >= MAX_FILES:
                raise ValidationError({"path": [f"A version holds at most {MAX_FILES} files."]})
            if offset != 0:
                raise Conflict(f"No upload of {path!r} yet: start at offset 0 (stored: 0).")
            row = ModelFile.objects.create(
                version=version, path=path, upload_id=storage.begin_upload(key=key)
            )
        elif offset == 0 and not row.upload_id:
            row.upload_id = storage.begin_upload(key=key)  # replacing a finished file
        try:
            size = storage.append(key=key, upload_id=row.upload_id, offset=offset, chunks=chunks)
        except UploadOffsetMismatch as exc:
            raise Conflict(
                f"The upload of {path!r} holds {exc.stored} bytes; continue at that offset"
                f" (stored: {exc.stored})."
            ) from None
        row.size = size
        row.save(update_fields=["size", "upload_id", "updated_at"])
    return size


def upload_status(*, version: ModelVersion, path: str) -> int:
    row = unique_row(version.files.filter(path=path))
    if row is None:
        return 0
    if row.upload_id:
        return _storage(version).upload_size(key=file_key(version, path), upload_id=row.upload_id)
    return row.size


def _manifest_sha(rows: list[tuple[str, int, str]]) -> str:
    digest = hashlib.sha256()
    for path, size, sha in sorted(rows):
        digest.update(f"{path}\t{size}\t{sha}\n".encode())
    return digest.hexdigest()


def _finish(version: ModelVersion, *, actor: Actor | None, user=None) -> ModelVersion:
    """Seal a version whose files are stored and whose rows carry size and sha256; mark it
    ready and tell the webhooks (the caller holds the version's row lock)."""
    rows = list(version.files.values_list("path", "size", "sha256"))
    version.file_count = len(rows)
    version.size_bytes = sum(size for _, size, _ in rows)
    version.manifest_sha256 = _manifest_sha(rows)
    version.state = VersionState.READY
    version.ready_at = timezone.now()
    version.error = ""
    version.save()
    _storage(version).seal(prefix=version.key_prefix)
    audit_record(
        actor=actor,
        user=user,
        tenant_id=version.tenant_id,
        action="model_version.ready",
        target=version,
        changes={"files": version.file_count, "bytes": version.size_bytes},
    )
    deliveries_enqueue(
        tenant_id=version.tenant_id,
        event=WebhookEvent.VERSION_CREATED,
        payload=lambda: version_event(version),
        model=version.model,
    )
    return version


def version_commit(*, actor: Actor, version: ModelVersion) -> ModelVersion:
    """Finish an open version: every upload completed, the manifest computed server-side from
    the stored bytes, the prefix sealed. Committing twice leaves one ready version."""
    authorize(
        actor,
        resource="model",
        action="create-version",
        tenant_id=version.tenant_id,
        target=version.model,
    )
    with transaction.atomic():
        version = (
            ModelVersion.objects.select_for_update()
            .select_related("model__project__tenant")
            .get(pk=version.pk)
        )
        if version.state == VersionState.READY:
            return version
        if version.state != VersionState.OPEN:
            raise Conflict(f"Version {version.number} is {version.state}.")
        if not version.files.exists():
            raise ValidationError({"files": ["Upload at least one file before committing."]})
        storage = _storage(version)
        for row in version.files.select_for_update():
            key = file_key(version, row.path)
            if row.upload_id:
                storage.finish_upload(key=key, upload_id=row.upload_id)
            digest, size = hashlib.sha256(), 0
            with storage.open(key=key) as stream:
                while chunk := stream.read(CHUNK_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
            row.sha256, row.size, row.upload_id = digest.hexdigest(), size, ""
            row.save(update_fields=["sha256", "size", "upload_id", "updated_at"])
        return _finish(version, actor=actor)


def version_create_with_files(
    *, actor: Actor, model: RegisteredModel, files: list[tuple[str, BinaryIO]], **fields
) -> ModelVersion:
    """A small version in one call: created, its files stored, committed. Every path is
    checked before anything is written."""
    if not files:
        raise ValidationError({"files": ["Give at least one file."]})
    if len(files) > MAX_FILES:
        raise ValidationError({"files": [f"At most {MAX_FILES} files."]})
    for path, _ in files:
        problem = file_path_problem(path)
        if problem:
            raise ValidationError({"files": [f"{path[:200]!r}: {problem}"]})
    version = version_create(actor=actor, model=model, **fields)
    for path, handle in files:
        version_upload(
            actor=actor,
            version=version,
            path=path,
            offset=0,
            chunks=iter(lambda handle=handle: handle.read(CHUNK_BYTES), b""),
        )
    return version_commit(actor=actor, version=version)


# -- copying a directory of the tenant's tree in (the worker) ----------------------------------


def _tree_source(*, model: RegisteredModel, path: str) -> Path:
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
    storage = _storage(version)
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
        storage = _storage(version)
        storage.delete(prefix=version.key_prefix)  # a copy cut short before
        version.files.all().delete()
        try:
            with transaction.atomic():
                _copy_tree(version, Path(version.source_path))
                return _finish(version, actor=None, user=version.created_by)
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


SECRET_OPTION_WORDS = ("token", "key", "secret", "password")


def job_params(spec: dict) -> dict:
    """A job's parameters: `--name value` and `--flag` pairs of its command line. An option
    whose name says token, key, secret or password (`--hf-token x`, `--api_key=x`) is left
    out, value and all: parameters are shown to every viewer of the model."""
    argv = (spec.get("command") or {}).get("argv") or []
    params: dict[str, str] = {}
    index = 1
    while index < len(argv):
        word = argv[index]
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            if not eq:
                nxt = argv[index + 1] if index + 1 < len(argv) else None
                if nxt is not None and not nxt.startswith("--"):
                    value, index = nxt, index + 1
                else:
                    value = "true"
            key = name.replace("-", "_")
            if any(word in key.lower() for word in SECRET_OPTION_WORDS):
                pass
            elif METRIC_NAME_RE.match(key):
                params[key] = value[:4096]
        index += 1
    return params


def version_register_from_attempt(*, attempt) -> ModelVersion | None:
    """Register what a succeeded training job left at its spec's `register_model.path` (inside
    the job's directory) as a new version, with its metrics (the last value of each), its
    parameters (the command line's options) and the dataset versions the attempt read; move
    the alias if the spec names one. Once per attempt, however often it runs."""
    from apps.jobs import paths
    from apps.jobs.states import State
    from apps.logs.models import JobMetric

    job = attempt.job
    options = (job.spec or {}).get("register_model")
    if not options or job.state != State.SUCCEEDED:
        return None
    with transaction.atomic():
        model, _ = RegisteredModel.objects.get_or_create(
            project=job.project,
            name=options["name"],
            defaults={"tenant_id": job.tenant_id, "created_by": job.user},
        )
        RegisteredModel.objects.select_for_update().get(pk=model.pk)  # one registration at once
        existing = ModelVersion.objects.filter(
            model=model, source_attempt=attempt, on_success=True
        ).first()
        if existing is not None:
            return existing
        metrics = {
            m.name: m.value
            for m in JobMetric.objects.filter(job=job)
            .order_by("name", "-step", "-timestamp")
            .distinct("name")
        }
        source = paths.job_dir(job) / options.get("path", "model")
        version = _next_version(
            model,
            framework=options.get("framework", ""),
            metrics=metrics,
            params=job_params(job.spec),
            source_job=job,
            source_attempt=attempt,
            source_path=str(source),
            on_success=True,
            state=VersionState.PENDING,
            created_by=job.user,
            description=f"registered by job {job.name} ({job.pk}) on success",
        )
        read = getattr(attempt, "dataset_versions", None)
        if read is not None:
            version.dataset_versions.set(read.all())
        audit_record(
            actor=None,
            user=job.user,
            tenant_id=job.tenant_id,
            action="model_version.create",
            target=version,
            changes={"job": str(job.pk)},
        )
    version = version_import(version_id=version.pk)
    if version.state == VersionState.READY and options.get("alias"):
        alias_set(
            actor=None, user=job.user, model=version.model, name=options["alias"], version=version
        )
    return version


# -- aliases and stages -------------------------------------------------------------------------


def alias_set(
    *, actor: Actor | None, model: RegisteredModel, name: str, version: ModelVersion, user=None
) -> ModelAlias:
    """Point `name` at `version` (a ready version of this model); the move is audited and
    the webhooks told."""
    if actor is not None:
        authorize(actor, resource="model", action="alias", tenant_id=model.tenant_id, target=model)
    _alias(name)
    if version.model_id != model.pk:
        raise ValidationError({"version": ["Not a version of this model."]})
    if version.state != VersionState.READY:
        raise ValidationError(
            {"version": [f"Version {version.number} is {version.state}, not ready."]}
        )
    tell = getattr(model, "tenant_has_webhooks", True)
    # without webhooks to tell, the one statement is the whole transaction
    with transaction.atomic() if tell else nullcontext():
        for _ in range(3):  # None: a concurrent call made it, or moved it to a new version
            audit = audit_event(
                actor=actor,
                user=user,
                tenant_id=model.tenant_id,
                action="model.alias",
                target=model,
                changes={"alias": name, "version": [None, version.number]},
            )
            if moved := alias_point.point(
                model_id=model.pk, name=name, version=version, audit=audit
            ):
                break
        else:
            raise Conflict("The alias kept changing; try again.")
        alias, before, changed = moved
        if changed and tell:
            _alias_tell(model=model, name=name, before=before, after=version.number)
    return alias


def alias_delete(*, actor: Actor, model: RegisteredModel, name: str) -> None:
    authorize(actor, resource="model", action="alias", tenant_id=model.tenant_id, target=model)
    with transaction.atomic():
        RegisteredModel.objects.select_for_update().get(pk=model.pk)
        alias = unique_row(
            ModelAlias.objects.filter(model=model, name=name).select_related("version")
        )
        if alias is None:
            raise ValidationError({"alias": [f"No alias {name!r} on this model."]})
        before = alias.version.number
        alias.delete()
        audit_record(
            actor=actor,
            tenant_id=model.tenant_id,
            action="model.alias",
            target=model,
            changes={"alias": name, "version": [before, None]},
        )
        _alias_tell(model=model, name=name, before=before, after=None)


def _alias_tell(*, model, name: str, before, after) -> None:
    deliveries_enqueue(
        tenant_id=model.tenant_id,
        model=model,
        event=WebhookEvent.ALIAS_CHANGED,
        payload=lambda: {
            **_model_ref(model),
            "alias": name,
            "from_version": before,
            "to_version": after,
        },
    )


def version_stage(*, actor: Actor, version: ModelVersion, stage: str) -> ModelVersion:
    """Move a ready version along none -> staging -> production -> archived (STAGE_MOVES)."""
    authorize(
        actor, resource="model", action="stage", tenant_id=version.tenant_id, target=version.model
    )
    if stage not in Stage.values:
        raise ValidationError({"stage": [f"One of {', '.join(Stage.values)}."]})
    with transaction.atomic():
        version = ModelVersion.objects.select_for_update().get(pk=version.pk)
        if version.stage == stage:
            return version
        if version.state != VersionState.READY:
            raise ValidationError({"stage": [f"Version {version.number} is not ready."]})
        if stage not in STAGE_MOVES[version.stage]:
            raise ValidationError({"stage": [f"A {version.stage} version cannot move to {stage}."]})
        before, version.stage = version.stage, stage
        version.save(update_fields=["stage", "updated_at"])
        audit_record(
            actor=actor,
            tenant_id=version.tenant_id,
            action="model_version.stage",
            target=version,
            changes={"stage": [before, stage]},
        )
    return version


def version_update(*, actor: Actor, version: ModelVersion, **fields) -> ModelVersion:
    """Edit what describes a version (card, description, tags); its files, metrics and
    lineage never change."""
    authorize(
        actor, resource="model", action="update", tenant_id=version.tenant_id, target=version.model
    )
    changes = {}
    if "card" in fields:
        if len(fields["card"]) > MAX_CARD:
            raise ValidationError({"card": [f"At most {MAX_CARD} characters."]})
        changes["card"] = ["…", "…"]
        version.card = fields["card"]
    return _describe(
        actor=actor, row=version, action="model_version.update", fields=fields, changes=changes
    )


# -- webhooks -----------------------------------------------------------------------------------


def _webhook_fields(*, url=None, events=None) -> dict:
    out = {}
    if url is not None:
        if len(url) > 2000:
            raise ValidationError({"url": ["At most 2000 characters."]})
        try:
            webhooks.resolve(url)
        except webhooks.UrlRefused as exc:
            raise ValidationError({"url": [str(exc)]}) from None
        out["url"] = url
    if events is not None:
        if not isinstance(events, list) or not events:
            raise ValidationError({"events": ["Name at least one event."]})
        unknown = sorted(set(events) - set(WebhookEvent.values))
        if unknown:
            raise ValidationError(
                {
                    "events": [
                        f"Unknown: {', '.join(unknown)}; one of {', '.join(WebhookEvent.values)}."
                    ]
                }
            )
        out["events"] = sorted(set(events))
    return out


def webhook_create(
    *, actor: Actor, tenant, url: str, events: list[str], description: str = ""
) -> tuple[Webhook, str]:
    """A webhook and its signing secret (returned here only: shown once)."""
    authorize(actor, resource="webhook", action="create", tenant_id=tenant.pk)
    fields = _webhook_fields(url=url, events=events)
    secret = "whsec_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        hook = Webhook.objects.create(
            tenant=tenant,
            secret=secret,
            description=description[:200],
            created_by=actor.user,
            **fields,
        )
        audit_record(
            actor=actor,
            tenant_id=tenant.pk,
            action="webhook.create",
            target=hook,
            changes={"url": url, "events": fields["events"]},
        )
    return hook, secret


def webhook_update(*, actor: Actor, webhook: Webhook, **fields) -> Webhook:
    authorize(actor, resource="webhook", action="update", tenant_id=webhook.tenant_id)
    values = _webhook_fields(url=fields.get("url"), events=fields.get("events"))
    if "active" in fields:
        values["active"] = bool(fields["active"])
    if "description" in fields:
        values["description"] = str(fields["description"])[:200]
    changes = {k: [getattr(webhook, k), v] for k, v in values.items() if getattr(webhook, k) != v}
    with transaction.atomic():
        for key, value in values.items():
            setattr(webhook, key, value)
        webhook.save()
        audit_record(
            actor=actor,
            tenant_id=webhook.tenant_id,
            action="webhook.update",
            target=webhook,
            changes=changes,
        )
    return webhook


def webhook_delete(*, actor: Actor, webhook: Webhook) -> None:
    authorize(actor, resource="webhook", action="delete", tenant_id=webhook.tenant_id)
    with transaction.atomic():
        audit_record(
            actor=actor, tenant_id=webhook.tenant_id, action="webhook.delete", target=webhook
        )
        webhook.delete()


def _model_ref(model: RegisteredModel) -> dict:
    return {
        "tenant": model.project.tenant.slug,
        "project": model.project.slug,
        "model": {"id": str(model.pk), "name": model.name},
    }


def version_event(version: ModelVersion) -> dict:
    return {
        **_model_ref(version.model),
        "version": {
            "id": str(version.pk),
            "number": version.number,
            "framework": version.framework,
            "metrics": version.metrics,
            "files": version.file_count,
            "bytes": version.size_bytes,
            "manifest_sha256": version.manifest_sha256,
            "source_job": str(version.source_job_id) if version.source_job_id else None,
        },
    }


def with_webhook_flag(models):
    """`models` (a queryset) each with `tenant_has_webhooks`, read in the same query: an
    event about a model whose tenant has no active webhook then costs no query."""
    hooks = Webhook.objects.filter(tenant_id=OuterRef("tenant_id"), active=True)
    return models.annotate(tenant_has_webhooks=Exists(hooks))


def deliveries_enqueue(
    *, tenant_id, event: str, payload, model: RegisteredModel | None = None
) -> list[WebhookDelivery]:
    """One delivery per active webhook of the tenant that wants `event`, in the caller's
    transaction; each is tried by the worker after commit. `payload`: a dict, or a function
    making it (called only when a webhook wants the event). `model`: the model the event is
    about, if read `with_webhook_flag` (then none are looked for when the tenant had none)."""
    if model is not None and getattr(model, "tenant_has_webhooks", True) is False:
        return []
    hooks = [
        hook
        for hook in Webhook.objects.filter(tenant_id=tenant_id, active=True)
        if event in hook.events
    ]
    if not hooks:
        return []
    now = timezone.now()
    payload = payload() if callable(payload) else payload
    deliveries = WebhookDelivery.objects.bulk_create(
        [
            WebhookDelivery(
                webhook=hook,
                event=event,
                payload={"event": event, "sent_for": now.isoformat(), **payload},
                next_attempt_at=now,
            )
            for hook in hooks
        ]
    )
    ids = [str(d.pk) for d in deliveries]

    def send():
        from apps.registry.tasks import deliver_webhook

        for pk in ids:
            deliver_webhook.delay(pk)

    transaction.on_commit(send)
    return deliveries


def backoff_seconds(attempts: int) -> float:
    """Before try `attempts + 1`: base * 2^(attempts-1), with up to 10 % jitter."""
    base = settings.TORUS_WEBHOOK_BACKOFF_SECONDS * (2 ** max(attempts - 1, 0))
    return base + base * 0.1 * secrets.randbelow(1000) / 1000


def delivery_try(*, delivery_id) -> tuple[WebhookDelivery | None, float | None]:
    """One try of a pending delivery that is due. Returns the delivery and, when another try
    is to follow, the seconds to wait. The claim (attempts + a lease as next_attempt_at) is
    committed before the request, so two workers never send the same try."""
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .select_related("webhook")
            .filter(pk=delivery_id, state=DeliveryState.PENDING)
            .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
            .first()
        )
        if delivery is None:
            return None, None
        delivery.attempts += 1
        lease = settings.TORUS_WEBHOOK_TIMEOUT_SECONDS * 3
        delivery.next_attempt_at = now + timedelta(seconds=lease)
        delivery.save(update_fields=["attempts", "next_attempt_at", "updated_at"])
    hook = delivery.webhook
    if not hook.active:
        result = webhooks.TryResult(ok=False, error="The webhook was deactivated.", permanent=True)
    else:
        result = webhooks.deliver_once(
            url=hook.url,
            secret=hook.secret,
            event=delivery.event,
            delivery_id=str(delivery.pk),
            payload=delivery.payload,
        )
    delivery.response_code = result.status
    delivery.error = result.error
    wait = None
    if result.ok:
        delivery.state, delivery.delivered_at, delivery.next_attempt_at = (
            DeliveryState.SUCCEEDED,
            timezone.now(),
            None,
        )
    elif result.permanent or delivery.attempts >= settings.TORUS_WEBHOOK_MAX_ATTEMPTS:
        delivery.state, delivery.next_attempt_at = DeliveryState.FAILED, None
    else:
        wait = backoff_seconds(delivery.attempts)
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=wait)
    delivery.save(
        update_fields=[
            "state",
            "response_code",
            "error",
            "delivered_at",
            "next_attempt_at",
            "updated_at",
        ]
    )
    return delivery, wait


def deliveries_overdue(*, grace_seconds: int = 30) -> list[str]:
    """Pending deliveries whose try is overdue (a lost message, a worker restart)."""
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    return [
        str(pk)
        for pk in WebhookDelivery.objects.filter(
            state=DeliveryState.PENDING, next_attempt_at__lte=cutoff
        ).values_list("pk", flat=True)[:1000]
    ]
