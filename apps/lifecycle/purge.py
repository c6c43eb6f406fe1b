"""Purge: an operator's removal of an archived thing and everything under it, after the
retention period (settings.TORUS_ARCHIVE_RETENTION_DAYS), as a resumable run of steps.

Order (docs/operations.md, "Purge and retention"): what still runs is stopped, then what lives
outside the database is removed while the rows that say what to remove still exist, the
database rows last:

    stop -> kubernetes -> elasticsearch -> s3 -> files -> slurm -> groups -> rows

Every step is idempotent and recorded in `Purge.steps_done` once it finished; a run skips the
steps already done, so a purge cut short at any point (a crash, a service away) is resumed by
running it again (`purge_run`, the beat's `lifecycle.purge_resume`, `manage.py torus_lifecycle
resume`). The rows step deletes the rows, marks the purge done and writes the audit event in
one transaction. The Purge row stays: the record that the thing existed and is gone.
"""

import logging
import os
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.compute.backends import for_cluster
from apps.compute.models import Cluster
from apps.core.exceptions import Conflict
from apps.datasets.models import Dataset, DatasetVersion
from apps.identity import privileged
from apps.identity.models import ClusterAssociation, PosixGroup
from apps.identity.services import group_name, group_retire
from apps.identity.storage import project_root, tenant_root
from apps.jobs import paths
from apps.jobs.models import Job
from apps.jobs.services import job_cancel_locked
from apps.jobs.states import TERMINAL
from apps.jobs.tasks import cancel_backend_jobs
from apps.lifecycle.models import Kind, Purge, PurgeState
from apps.logs.es import client as es_client
from apps.logs.es import index_pattern
from apps.registry.models import ModelVersion, RegisteredModel
from apps.serving.models import Deployment, Replica, ReplicaState
from apps.tenancy.audit import audit_event
from apps.tenancy.models import Project, Tenant

logger = logging.getLogger(__name__)

STEPS = ("stop", "kubernetes", "elasticsearch", "s3", "files", "slurm", "groups", "rows")
MODELS = {
    Kind.TENANT: Tenant,
    Kind.PROJECT: Project,
    Kind.DATASET: Dataset,
    Kind.MODEL: RegisteredModel,
    Kind.DEPLOYMENT: Deployment,
}
ES_CHUNK = 1000  # job ids per delete-by-query


@dataclass
class Scope:
    """What a purge removes, read from the rows (which stay until the last step)."""

    tenant: Tenant
    projects: list[Project] = field(default_factory=list)  # whole projects
    jobs: list[Job] = field(default_factory=list)
    datasets: list[Dataset] = field(default_factory=list)
    models: list[RegisteredModel] = field(default_factory=list)
    deployments: list[Deployment] = field(default_factory=list)
    whole_tenant: bool = False


def _target(kind: str, target_id):
    return MODELS[kind].objects.filter(pk=target_id).first()


def _tenant_of(kind: str, target) -> Tenant:
    return target if kind == Kind.TENANT else target.tenant


def _repr(kind: str, target) -> str:
    if kind == Kind.TENANT:
        return target.slug
    if kind == Kind.PROJECT:
        return f"{target.tenant.slug}/{target.slug}"
    return f"{target.tenant.slug}/{target.project.slug}/{target.name}"


def _archived_at(kind: str, target):
    """When the thing was archived: its own archive, or the project's or tenant's it is in."""
    chain = [target]
    if kind != Kind.TENANT:
        if kind != Kind.PROJECT:
            chain.append(target.project)
        chain.append(target.tenant)
    return next((t.archived_at for t in chain if t.archived_at is not None), None)


def purge_request(*, kind: str, target_id: uuid.UUID, requested_by) -> Purge:
    """The purge of an archived thing past its retention: a new one, or the one already
    running (resumed, not refused). Conflict: not archived, retention not passed, purged."""
    if kind not in MODELS:
        raise ValidationError({"kind": f"Must be one of {', '.join(MODELS)}."})
    try:
        target_id = uuid.UUID(str(target_id))
    except ValueError:
        raise ValidationError({"id": "Must be a UUID."}) from None
    existing = Purge.objects.filter(kind=kind, target_id=target_id).first()
    if existing is not None:
        if existing.state == PurgeState.DONE:
            when = existing.finished_at or existing.updated_at
            raise Conflict(f"The {kind} {existing.target_repr} was purged on {when:%Y-%m-%d}.")
        return existing
    target = _target(kind, target_id)
    if target is None:
        raise ValidationError({"id": f"No {kind} with this id."})
    archived_at = _archived_at(kind, target)
    if archived_at is None:
        raise Conflict(f"The {kind} {_repr(kind, target)} is not archived; archive it first.")
    days = settings.TORUS_ARCHIVE_RETENTION_DAYS
    allowed = archived_at + timedelta(days=days)
    if timezone.now() < allowed:
        raise Conflict(
            f"The {kind} {_repr(kind, target)} was archived on {archived_at:%Y-%m-%d}; its "
            f"retention of {days} days has not passed (it can be purged from "
            f"{allowed:%Y-%m-%d %H:%M} UTC)."
        )
    tenant = _tenant_of(kind, target)
    purge, _ = Purge.objects.get_or_create(
        kind=kind,
        target_id=target_id,
        defaults={
            "target_repr": _repr(kind, target)[:200],
            "tenant_id_value": tenant.pk,
            "tenant_slug": tenant.slug,
            "requested_by": requested_by if getattr(requested_by, "pk", None) else None,
        },
    )
    logger.info("purge of %s %s requested", kind, purge.target_repr)
    return purge


def _scope(purge: Purge) -> Scope | None:
    target = _target(purge.kind, purge.target_id)
    if target is None:
        return None
    kind = purge.kind
    if kind == Kind.TENANT:
        return Scope(
            tenant=target,
            projects=list(Project.objects.filter(tenant=target)),
            jobs=list(Job.objects.filter(tenant=target).select_related("project", "cluster")),
            datasets=list(Dataset.objects.filter(tenant=target).select_related("project")),
            models=list(RegisteredModel.objects.filter(tenant=target).select_related("project")),
            deployments=list(Deployment.objects.filter(tenant=target)),
            whole_tenant=True,
        )
    if kind == Kind.PROJECT:
        return Scope(
            tenant=target.tenant,
            projects=[target],
            jobs=list(Job.objects.filter(project=target).select_related("project", "cluster")),
            datasets=list(Dataset.objects.filter(project=target).select_related("project")),
            models=list(RegisteredModel.objects.filter(project=target).select_related("project")),
            deployments=list(Deployment.objects.filter(project=target)),
        )
    if kind == Kind.DATASET:
        return Scope(tenant=target.tenant, datasets=[target])
    deployments = list(Deployment.objects.filter(model=target)) if kind == Kind.MODEL else [target]
    replica_jobs = Replica.objects.filter(deployment__in=deployments).exclude(job=None)
    jobs = Job.objects.filter(pk__in=replica_jobs.values("job_id"))
    return Scope(
        tenant=target.tenant,
        jobs=list(jobs.select_related("project", "cluster")),
        models=[target] if kind == Kind.MODEL else [],
        deployments=deployments,
    )


# -- the steps ----------------------------------------------------------------------------


def _step_stop(purge: Purge, scope: Scope) -> None:
    """Deployments scaled to nothing, unfinished jobs cancelled (on their cluster at once)."""
    ids = [d.pk for d in scope.deployments]
    Deployment.objects.filter(pk__in=ids).update(replicas_min=0, replicas_desired=0)
    Replica.objects.filter(deployment_id__in=ids).exclude(state=ReplicaState.STOPPED).update(
        state=ReplicaState.STOPPED, state_reason="purged", stopped_at=timezone.now()
    )
    for job in scope.jobs:
        if job.state in TERMINAL:
            continue
        with transaction.atomic():
            locked = Job.objects.select_for_update().get(pk=job.pk)
            if locked.state in TERMINAL:
                continue
            job_cancel_locked(job=locked, reason=f"purged ({purge.kind} {purge.target_repr})")
        cancel_backend_jobs(str(job.pk))  # here and now: the task itself, not sent


def _clusters(jobs: list[Job]) -> list[Cluster]:
    return list({j.cluster_id: j.cluster for j in jobs if j.cluster_id is not None}.values())


def _step_kubernetes(purge: Purge, scope: Scope) -> None:
    """The attempts' cluster objects; for whole projects, every object labelled with them."""
    for cluster in _clusters(scope.jobs):
        backend = for_cluster(cluster)
        ours = [j for j in scope.jobs if j.cluster_id == cluster.pk]
        backend_ids = [
            a.backend_id
            for j in ours
            for a in j.attempts.exclude(backend_id="")
            if not scope.projects  # a whole project's go by label below
        ]
        backend.objects_remove(tenant=scope.tenant.slug, project=None, backend_ids=backend_ids)
        for project in scope.projects:
            backend.objects_remove(tenant=scope.tenant.slug, project=project.slug, backend_ids=[])


def _step_elasticsearch(purge: Purge, scope: Scope) -> None:
    """The purged jobs' log lines (the tenant's daily indices; all of them for a tenant)."""
    es = es_client(timeout=300)
    pattern = index_pattern(scope.tenant.slug)
    if scope.whole_tenant:
        names = es.indices.get(index=pattern, allow_no_indices=True, ignore_unavailable=True)
        own = f"{pattern[:-1]}"
        for name in names:  # acme-* also matches acme-labs-*: only this tenant's days
            day = name[len(own) :]
            if name.startswith(own) and len(day) == 10 and day.replace(".", "").isdigit():
                es.indices.delete(index=name, ignore_unavailable=True)
        return
    ids = [str(j.pk) for j in scope.jobs]
    for start in range(0, len(ids), ES_CHUNK):
        _delete_matching(es, pattern, {"terms": {"job": ids[start : start + ES_CHUNK]}})


def _delete_matching(es, pattern: str, query: dict) -> None:
    """Delete every document the query finds, a page of ids at a time (bulk deletes: the
    distribution may lack delete-by-query, a module of its own)."""
    es.indices.refresh(index=pattern, allow_no_indices=True, ignore_unavailable=True)
    while True:
        found = es.search(
            index=pattern,
            query=query,
            size=ES_CHUNK,
            source=False,
            allow_no_indices=True,
            ignore_unavailable=True,
        )["hits"]["hits"]
        if not found:
            return
        actions = [{"delete": {"_index": hit["_index"], "_id": hit["_id"]}} for hit in found]
        es.bulk(operations=actions, refresh=True)


def _s3_prefixes(scope: Scope) -> list[str]:
    prefixes = [
        d.storage_prefix
        for d in scope.datasets
        if DatasetVersion.objects.filter(dataset=d, storage_kind="s3").exists()
    ]
    for model in scope.models:
        if ModelVersion.objects.filter(model=model, storage="s3").exists():
            project = model.project
            prefixes.append(f"{project.tenant.slug}/{project.slug}/models/{model.pk}")
    return prefixes


def _step_s3(purge: Purge, scope: Scope) -> None:
    """Dataset versions and model files kept in the object store."""
    prefixes = _s3_prefixes(scope)
    if not prefixes:
        return
    from apps.datasets.storage import storage_for

    storage = storage_for("s3")
    for prefix in prefixes:
        storage.delete(prefix=prefix)


def _cache_dirs(*parts: str) -> list[Path]:
    """<cache root>/<node>/<parts> on every node directory of the dataset cache."""
    root = Path(settings.TORUS_DATASET_CACHE_ROOT)
    try:
        nodes = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    return [root.joinpath(node, *parts) for node in nodes]


def _step_files(purge: Purge, scope: Scope) -> None:
    """Directories through the privileged helper (never by the platform's own hand, never
    through a link): the whole tree of a tenant or project with its node caches; otherwise
    a dataset's or model's files and the replica jobs' directories."""
    job_root = Path(settings.TORUS_JOB_ROOT)
    trees: list[Path] = []
    if scope.whole_tenant:
        trees += [tenant_root(scope.tenant), *_cache_dirs(scope.tenant.slug)]
    elif scope.projects:
        for project in scope.projects:
            trees += [project_root(project), *_cache_dirs(scope.tenant.slug, project.slug)]
    else:
        trees += [job_root / d.storage_prefix for d in scope.datasets]
        trees += [
            job_root / m.tenant.slug / m.project.slug / "models" / str(m.pk) for m in scope.models
        ]
        trees += [paths.job_dir(j) for j in scope.jobs]
    for tree in trees:
        removed = privileged.tree_remove(path=tree)
        logger.info("purge %s: %s %s", purge.pk, tree, "removed" if removed else "already gone")


def _accounts(scope: Scope) -> list[str]:
    accounts = [group_name(tenant=scope.tenant, project=p) for p in scope.projects]
    if scope.whole_tenant:
        accounts.append(group_name(tenant=scope.tenant))  # the parent, last
    return accounts


def _step_slurm(purge: Purge, scope: Scope) -> None:
    """The projects' (and the tenant's) cluster accounts with their users' associations, on
    every cluster that has them, then their ClusterAssociation rows."""
    accounts = _accounts(scope)
    if not accounts:
        return
    held = ClusterAssociation.objects.filter(account__in=accounts).values("cluster")
    clusters = {c.pk: c for c in Cluster.objects.filter(pk__in=held)}
    clusters.update({c.pk: c for c in _clusters(scope.jobs)})
    for cluster in clusters.values():
        backend = for_cluster(cluster)
        for account in accounts:
            backend.account_remove(account=account)
    ClusterAssociation.objects.filter(account__in=accounts).delete()


def _step_groups(purge: Purge, scope: Scope) -> None:
    """The directory groups removed; their rows retired (r-<gid>: the gid never reused)."""
    groups = PosixGroup.objects.filter(project__in=scope.projects)
    if scope.whole_tenant:
        groups = groups | PosixGroup.objects.filter(tenant=scope.tenant)
    for group in groups:
        group_retire(group=group)


def _delete_rows(scope: Scope, kind: str) -> None:
    """Bottom up, so no protecting reference stands in the way."""
    Deployment.objects.filter(pk__in=[d.pk for d in scope.deployments]).delete()
    Job.objects.filter(pk__in=[j.pk for j in scope.jobs]).delete()
    Dataset.objects.filter(pk__in=[d.pk for d in scope.datasets]).delete()
    RegisteredModel.objects.filter(pk__in=[m.pk for m in scope.models]).delete()
    for project in scope.projects:
        project.delete()
    if kind == Kind.TENANT:
        scope.tenant.delete()


def _finish(purge: Purge, scope: Scope | None) -> None:
    """The rows deleted, the purge marked done and audited, in one transaction."""
    with transaction.atomic():
        locked = Purge.objects.select_for_update().get(pk=purge.pk)
        if locked.state == PurgeState.DONE:
            purge.refresh_from_db()
            return
        if scope is not None:
            _delete_rows(scope, purge.kind)
        locked.steps_done = [*locked.steps_done, "rows"]
        locked.state, locked.finished_at, locked.last_error = PurgeState.DONE, timezone.now(), ""
        locked.save(
            update_fields=["steps_done", "state", "finished_at", "last_error", "updated_at"]
        )
        if Tenant.objects.filter(pk=purge.tenant_id_value).exists():
            event = audit_event(
                actor=None,
                user=purge.requested_by,
                tenant_id=purge.tenant_id_value,
                action=f"{purge.kind}.purge",
                changes={"purge": str(purge.pk), "runs": locked.runs},
            )
            event.target_type, event.target_id = purge.kind, str(purge.target_id)
            event.target_repr = purge.target_repr
            event.save()
    purge.refresh_from_db()


STEP_FUNCTIONS = {
    "stop": _step_stop,
    "kubernetes": _step_kubernetes,
    "elasticsearch": _step_elasticsearch,
    "s3": _step_s3,
    "files": _step_files,
    "slurm": _step_slurm,
    "groups": _step_groups,
}


def purge_run(*, purge: Purge, stop_after: str | None = None, report=None) -> Purge:
    """Run (or resume) a purge: each step not yet done, in order, recorded as it finishes.
    A step that fails leaves the purge running with `last_error` and raises; running it
    again resumes there. `stop_after` (tests) ends the run after that step, as a crash
    would; `report(step, state)` hears each step ("done", "skipped")."""
    if stop_after is not None and stop_after not in STEPS:
        raise ValueError(f"stop_after must be one of {STEPS}")
    purge.refresh_from_db()
    if purge.state == PurgeState.DONE:
        return purge
    Purge.objects.filter(pk=purge.pk).update(runs=purge.runs + 1, updated_at=timezone.now())
    purge.refresh_from_db()
    scope = _scope(purge)
    for step in STEPS:
        if step in purge.steps_done:
            if report:
                report(step, "skipped")
            continue
        try:
            if step == "rows":
                _finish(purge, scope)
            elif scope is not None:  # the target's rows gone: nothing left to find
                STEP_FUNCTIONS[step](purge, scope)
        except Exception as exc:
            purge.last_error = f"{step}: {exc}"[:4000]
            purge.save(update_fields=["last_error", "updated_at"])
            logger.warning("purge of %s %s: step %s failed: %s", purge.kind, purge.target_repr,
                           step, exc)  # fmt: skip
            raise
        if step != "rows":
            purge.steps_done = [*purge.steps_done, step]
            purge.save(update_fields=["steps_done", "updated_at"])
        logger.info("purge of %s %s: %s done", purge.kind, purge.target_repr, step)
        if report:
            report(step, "done")
        if stop_after == step:
            return purge
    logger.info("purge of %s %s: done", purge.kind, purge.target_repr)
    return purge
