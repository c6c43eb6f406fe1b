"""Writes for deployments: create, update (scale, version, limits), delete, wake, a replica
reported broken; and the events that record each change. Keys: apps/serving/deployment_keys.py.

Each authorises at its boundary with the policy module's `authorize()` (the same call the API
layer makes). Replicas are started and stopped by the reconciler (apps/serving/reconcile.py),
which converges on what these functions write; every change that matters for routing is
published to the gateway's route table on commit."""

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import serializers

from apps.core.actor import Actor
from apps.serving import routes
from apps.serving.models import (
    Deployment,
    DeploymentEvent,
    DeploymentState,
    EventKind,
    Replica,
    ReplicaState,
)
from apps.tenancy.audit import audit_record
from apps.tenancy.models import Project
from apps.tenancy.policies import authorize

logger = logging.getLogger(__name__)

# what a PATCH may change; resources and the engine's settings take effect on new replicas
UPDATABLE = {
    "replicas",
    "replicas_min",
    "replicas_max",
    "autoscale_target",
    "scale_to_zero_after_s",
    "tokens_per_minute",
    "max_request_bytes",
    "max_tokens",
    "model",
}
ROUTING_FIELDS = {"tokens_per_minute", "max_request_bytes", "max_tokens"}


def event_record(
    *, deployment: Deployment, kind: str, message: str = "", data: dict | None = None
) -> DeploymentEvent:
    return DeploymentEvent.objects.create(
        deployment=deployment, kind=kind, message=message[:2000], data=data or {}
    )


def fit_check(*, deployment: Deployment, version) -> dict:
    """Will one replica of `version` fit what the deployment asks for (apps/compute/fit.py)?
    A 400 at `gpus` (or `memory` on CPU) with the estimator's reason when it cannot; the
    estimate otherwise (kept in the deployment's event)."""
    from apps.compute.fit import check_deployment
    from apps.jobs.inference import model_path
    from apps.serving.gguf_config import GGUFError, config_from_gguf
    from apps.serving.replicas import model_file

    try:
        config = config_from_gguf(model_path(version) / model_file(version))
    except (GGUFError, OSError) as exc:
        raise serializers.ValidationError(
            {"model": [f"Version {version}: not a GGUF model the runtime can read ({exc})."]}
        ) from None
    report = check_deployment(
        model_config=config,
        accelerator=deployment.accelerator,
        gpu_type=deployment.gpu_type or None,
        gpus=deployment.gpus,
        memory_mb=deployment.memory_mb,
        slots=deployment.slots,
        context=deployment.context,
        kv_cache_type=deployment.kv_cache_type,
    )
    if report.fits is False:
        field = "gpus" if deployment.gpus else "memory"
        raise serializers.ValidationError({field: [report.reason]})
    return {
        "fits": report.fits,
        "reason": report.reason,
        "tensor_parallel": report.tensor_parallel,
        "per_device_bytes": report.per_device_bytes,
        "breakdown": report.breakdown,
    }


def _resolve(*, actor: Actor, project: Project, ref: str):
    """(version, alias to follow or '') for a model reference of the deployment's project."""
    from apps.jobs.inference import ALIAS_REF_RE, model_resolve

    version = model_resolve(actor=actor, project=project, ref=ref)
    alias = ALIAS_REF_RE.match(ref)
    follow = alias.group(2) if alias and alias.group(2) != "latest" else ""
    from apps.serving.replicas import model_file

    if not model_file(version):
        raise serializers.ValidationError(
            {"model": [f"Version {version} has no .gguf file for the llama.cpp runtime."]}
        )
    return version, follow


def _check_counts(*, replicas: int, low: int, high: int) -> None:
    errors = {}
    if high < low:
        errors["replicas_max"] = [f"At least replicas_min ({low})."]
    elif high < 1:
        errors["replicas_max"] = ["At least 1."]
    elif not low <= replicas <= high:
        errors["replicas"] = [f"Between replicas_min ({low}) and replicas_max ({high})."]
    if errors:
        raise serializers.ValidationError(errors)


def deployment_check(*, actor: Actor, project: Project, data: dict) -> dict:
    """A create's checks, nothing written (the deploy form's dry run): the version it would
    serve, the alias it would follow and the fit estimate; a 400 as the create would give."""
    deployment, fit = _prepare(actor=actor, project=project, data=data)
    return {
        "fit": fit,
        "version": deployment.version.number,
        "follow_alias": deployment.follow_alias,
    }


def deployment_create(*, actor: Actor, project: Project, data: dict) -> Deployment:
    """A deployment from validated input (apps/serving/api/serializers.py): the model
    reference resolved, the counts and the fit checked, then written with its `created`
    event; the reconciler starts its replicas."""
    deployment, fit = _prepare(actor=actor, project=project, data=data)
    version, follow, replicas = (
        deployment.version,
        deployment.follow_alias,
        deployment.replicas_desired,
    )
    with transaction.atomic():
        try:
            with transaction.atomic():
                deployment.save()
        except IntegrityError:  # made by a concurrent create just now
            raise serializers.ValidationError(
                {"name": [f"A deployment named {deployment.name!r} exists in this project."]}
            ) from None
        event_record(
            deployment=deployment,
            kind=EventKind.CREATED,
            message=f"{version} with {replicas} replica(s)"
            + (f", following alias {follow}" if follow else ""),
            data={"version": version.number, "replicas": replicas, "fit": fit},
        )
        audit_record(
            actor=actor,
            tenant_id=project.tenant_id,
            action="deployment.create",
            target=deployment,
            changes={"name": [None, deployment.name], "model": [None, deployment.ref]},
        )
        routes.publish_on_commit(deployment_id=deployment.pk)
    return deployment


def _prepare(*, actor: Actor, project: Project, data: dict) -> tuple[Deployment, dict]:
    """The unsaved deployment a create would write, every check passed, and its fit."""
    authorize(
        actor, resource="deployment", action="create", tenant_id=project.tenant_id, target=project
    )
    version, follow = _resolve(actor=actor, project=project, ref=data["model"])
    replicas = data.get("replicas", 1)
    high = data.get("replicas_max", max(replicas, data.get("replicas_min", 0)))
    low = data.get("replicas_min", 0 if data.get("scale_to_zero_after_s") else min(replicas, high))
    _check_counts(replicas=replicas, low=low, high=high)
    if Deployment.objects.filter(project=project, name=data["name"]).exists():
        raise serializers.ValidationError(
            {"name": [f"A deployment named {data['name']!r} exists in this project."]}
        )
    fields = {
        key: data[key]
        for key in (
            "cpus",
            "memory_mb",
            "gpus",
            "gpu_type",
            "accelerator",
            "partition",
            "slots",
            "context",
            "kv_cache_type",
            "scale_to_zero_after_s",
            "autoscale_target",
            "tokens_per_minute",
            "max_request_bytes",
            "max_tokens",
        )
        if key in data
    }
    deployment = Deployment(
        tenant=project.tenant,
        project=project,
        name=data["name"],
        model=version.model,
        ref=data["model"],
        follow_alias=follow,
        version=version,
        replicas_min=low,
        replicas_max=high,
        replicas_desired=replicas,
        cluster=data.get("cluster"),
        created_by=actor.user,
        **fields,
    )
    return deployment, fit_check(deployment=deployment, version=version)


def deployment_update(*, actor: Actor, deployment: Deployment, data: dict) -> Deployment:
    """Scale (replicas, min, max), move to another version (`model`: a reference; the
    reconciler rolls the replicas over), or change limits. All checked before any write."""
    authorize(
        actor,
        resource="deployment",
        action="update",
        tenant_id=deployment.tenant_id,
        target=deployment,
    )
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        if deployment.state == DeploymentState.STOPPED:
            raise serializers.ValidationError(
                {"non_field_errors": ["The deployment is stopped; make a new one."]}
            )
        changes: dict = {}
        low = data.get("replicas_min", deployment.replicas_min)
        high = data.get("replicas_max", deployment.replicas_max)
        desired = data.get("replicas", min(max(deployment.replicas_desired, low), high))
        if deployment.state == DeploymentState.IDLE and "replicas" not in data:
            desired = 0  # scaled to zero stays there until a request or a scale
        else:
            _check_counts(replicas=desired, low=low, high=high)
        for field, value in (
            ("replicas_min", low),
            ("replicas_max", high),
            ("replicas_desired", desired),
        ):
            if getattr(deployment, field) != value:
                changes[field] = [getattr(deployment, field), value]
                setattr(deployment, field, value)
        for field in UPDATABLE - {"replicas", "replicas_min", "replicas_max", "model"}:
            if field in data and getattr(deployment, field) != data[field]:
                changes[field] = [getattr(deployment, field), data[field]]
                setattr(deployment, field, data[field])
        if "model" in data and data["model"] != deployment.ref:
            project = deployment.project
            version, follow = _resolve(actor=actor, project=project, ref=data["model"])
            if version.model_id != deployment.model_id:
                raise serializers.ValidationError(
                    {"model": [f"A version of {deployment.model.name}, the deployed model."]}
                )
            fit_check(deployment=deployment, version=version)
            changes["model"] = [deployment.ref, data["model"]]
            deployment.ref, deployment.follow_alias = data["model"], follow
            if version.pk != deployment.version_id:
                rollout_begin(deployment=deployment, version=version, why="by request")
        if not changes:
            return deployment
        if "replicas_desired" in changes:
            before, after = changes["replicas_desired"]
            kind = EventKind.SCALED_UP if after > before else EventKind.SCALED_DOWN
            event_record(
                deployment=deployment,
                kind=kind,
                message=f"{before} -> {after} replica(s) by {actor.user}",
                data={"from": before, "to": after, "by": "request"},
            )
            if after and deployment.state == DeploymentState.IDLE:
                deployment.state, deployment.state_reason = DeploymentState.STARTING, ""
        deployment.save()
        rest = set(changes) - {"replicas_desired", "replicas_min", "replicas_max", "model"}
        if rest:
            event_record(
                deployment=deployment,
                kind=EventKind.UPDATED,
                message=", ".join(sorted(rest)),
                data={key: changes[key][1] for key in rest},
            )
        audit_record(
            actor=actor,
            tenant_id=deployment.tenant_id,
            action="deployment.update",
            target=deployment,
            changes=changes,
        )
        if ROUTING_FIELDS & set(changes):
            routes.publish_on_commit(deployment_id=deployment.pk)
    return deployment


def rollout_begin(*, deployment: Deployment, version, why: str) -> None:
    """Point a (row-locked) deployment at another version; the reconciler starts replicas of
    it, waits for them to be READY, then drains and stops the old ones."""
    before = deployment.version
    deployment.version = version
    deployment.state, deployment.state_reason = DeploymentState.UPDATING, f"rolling to {version}"
    event_record(
        deployment=deployment,
        kind=EventKind.ROLLOUT_STARTED,
        message=f"{before} -> {version} ({why})",
        data={"from": before.number, "to": version.number},
    )


def deployment_delete(*, actor: Actor, deployment: Deployment) -> None:
    """Stop every replica's job and remove the deployment (its events, keys and records)."""
    from apps.serving.replicas import replica_cancel

    authorize(
        actor,
        resource="deployment",
        action="delete",
        tenant_id=deployment.tenant_id,
        target=deployment,
    )
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        replicas = list(deployment.replicas.exclude(state=ReplicaState.STOPPED))
        for replica in replicas:
            replica_cancel(replica=replica)
        audit_record(
            actor=actor,
            tenant_id=deployment.tenant_id,
            action="deployment.delete",
            target=deployment,
            changes={"name": [deployment.name, None]},
        )
        deployment_id = deployment.pk
        deployment.delete()
        routes.publish_on_commit(deployment_id=deployment_id)


def deployment_stop(*, thing: Deployment, reason: str) -> None:
    """An archived deployment (or one of an archived project or model): no replica wanted, its
    replicas' jobs cancelled, the gateway told; inside the archive's transaction."""
    from apps.serving.replicas import replica_cancel

    deployment = Deployment.objects.select_for_update().get(pk=thing.pk)
    for replica in deployment.replicas.exclude(state=ReplicaState.STOPPED):
        replica_cancel(replica=replica)
    deployment.replicas_desired = 0
    deployment.state, deployment.state_reason = DeploymentState.STOPPED, reason
    deployment.save(update_fields=["replicas_desired", "state", "state_reason", "updated_at"])
    event_record(deployment=deployment, kind=EventKind.STOPPED, message=reason, data={})
    routes.publish_on_commit(deployment_id=deployment.pk)


def deployment_revive(*, thing: Deployment) -> None:
    """A restored deployment is wanted again at its minimum (none: idle, woken by a request)."""
    deployment = Deployment.objects.select_for_update().get(pk=thing.pk)
    deployment.replicas_desired = deployment.replicas_min
    deployment.state = DeploymentState.PENDING if deployment.replicas_min else DeploymentState.IDLE
    deployment.state_reason = "restored"
    deployment.save(update_fields=["replicas_desired", "state", "state_reason", "updated_at"])
    routes.publish_on_commit(deployment_id=deployment.pk)


def wake(*, deployment_id) -> None:
    """A request came and no replica is READY: if the deployment is scaled to zero, want one
    replica again (idempotent: one already wanted is being started or replaced by the
    reconciler). Called by the gateway."""
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().filter(pk=deployment_id).first()
        if deployment is None or deployment.state in (
            DeploymentState.STOPPED,
            DeploymentState.FAILED,
        ):
            return
        if deployment.replicas_desired > 0:
            return  # replicas wanted already: the reconciler is starting or replacing them
        before = deployment.replicas_desired
        deployment.replicas_desired = max(deployment.replicas_min, 1, before)
        deployment.woken_at = timezone.now()
        deployment.state, deployment.state_reason = DeploymentState.STARTING, "woken by a request"
        deployment.save(
            update_fields=["replicas_desired", "woken_at", "state", "state_reason", "updated_at"]
        )
        event_record(
            deployment=deployment,
            kind=EventKind.WOKEN,
            message=f"a request woke it: {before} -> {deployment.replicas_desired} replica(s)",
            data={"from": before, "to": deployment.replicas_desired},
        )
        routes.publish_on_commit(deployment_id=deployment.pk)


def report_replica_failure(*, replica_id, reason: str) -> None:
    """The gateway could not reach a replica or got a broken answer: out of the route table at
    once; the reconciler replaces it."""
    from apps.serving.replicas import replica_cancel

    with transaction.atomic():
        replica = (
            Replica.objects.select_for_update()
            .select_related("deployment")
            .filter(pk=replica_id)
            .first()
        )
        if replica is None or replica.state not in (ReplicaState.READY, ReplicaState.STARTING):
            return
        replica_mark_unhealthy(replica=replica, reason=f"reported by the gateway: {reason}")
        replica_cancel(replica=replica)


def replica_mark_unhealthy(*, replica: Replica, reason: str) -> None:
    replica.state, replica.state_reason = ReplicaState.UNHEALTHY, reason[:2000]
    replica.save(update_fields=["state", "state_reason", "updated_at"])
    event_record(
        deployment=replica.deployment,
        kind=EventKind.REPLICA_UNHEALTHY,
        message=reason,
        data={"replica": str(replica.pk)},
    )
    routes.publish_on_commit(deployment_id=replica.deployment_id)
