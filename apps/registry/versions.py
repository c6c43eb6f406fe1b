"""Models and versions: create, describe, stage and delete them. A version is made open for
uploads (apps/registry/uploads.py) or pending a copy from the tenant's tree
(apps/registry/trees.py). Functions taking an `actor` authorise at their boundary
(apps/tenancy/policies.py), as the API layer does."""

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from apps.core.actor import Actor
from apps.datasets.storage import storage_for
from apps.registry.models import STAGE_MOVES, ModelVersion, RegisteredModel, Stage, VersionState
from apps.registry.trees import models_area_ensure, tree_source
from apps.registry.validation import (
    MAX_CARD,
    valid_metrics,
    valid_name,
    valid_params,
    valid_tags,
)
from apps.tenancy.audit import audit_record
from apps.tenancy.models import Project
from apps.tenancy.policies import authorize

# -- models -------------------------------------------------------------------------------------


def model_create(
    *, actor: Actor, project: Project, name: str, description: str = "", tags=None
) -> RegisteredModel:
    authorize(actor, resource="model", action="create", tenant_id=project.tenant_id, target=project)
    valid_name(name)
    tags = valid_tags(tags)
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
        tags = valid_tags(fields["tags"])
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


def next_version(model: RegisteredModel, **fields) -> ModelVersion:
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
        metrics=valid_metrics(metrics),
        params=valid_params(params),
        tags=valid_tags(tags),
        created_by=actor.user,
    )
    datasets = _dataset_versions(tenant_id=model.tenant_id, refs=dataset_versions)
    if source_attempt is not None:
        if source_attempt.job.tenant_id != model.tenant_id:
            raise ValidationError({"source_attempt": ["Job attempt not found."]})
        fields.update(source_attempt=source_attempt, source_job=source_attempt.job)
    if source_path:
        tree_source(model=model, path=source_path)  # a 400 now, before anything is written
        fields.update(source_path=source_path, state=VersionState.PENDING)
    models_area_ensure(project=model.project)
    with transaction.atomic():
        version = next_version(model, **fields)
        if datasets:
            version.dataset_versions.set(datasets)
        audit_record(
            actor=actor, tenant_id=model.tenant_id, action="model_version.create", target=version
        )
        if source_path:
            _enqueue_import(version)
    return version


def _enqueue_import(version: ModelVersion) -> None:
    from celery import current_app

    pk = str(version.pk)  # sent by name: services never import tasks
    transaction.on_commit(lambda: current_app.send_task("registry.import_version", args=[pk]))


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
