"""Lineage, read from jobs' attempts: from a model version back to its job, attempts, metrics
and dataset versions, and from a dataset version forward to the jobs that read it and the
model versions that came from it. Every function takes the actor and sees only its tenants.
The registry's API serves these through apps/registry/lineage.py (registered in ready())."""

import functools

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import Exists, OuterRef, Q

from apps.core.actor import Actor
from apps.jobs.models import Job, JobAttempt
from apps.registry.models import ModelVersion, RegisteredModel
from apps.registry.selectors import model_visible, version_ref


def attempt_visible(*, actor: Actor, attempt_id) -> JobAttempt | None:
    """The job attempt `attempt_id` with its job, if the actor sees it (None otherwise)."""
    return JobAttempt.objects.visible_to(actor).select_related("job").filter(pk=attempt_id).first()


def _dataset_version_ref(dv) -> dict:
    return {
        "id": str(dv.pk),
        "dataset": {"id": str(dv.dataset_id), "name": dv.dataset.name},
        "number": dv.number,
        "ref": f"{dv.dataset.name}:{dv.number}",
        "state": dv.state,
        "manifest_sha256": dv.manifest_sha256,
    }


def _job_ref(job) -> dict:
    base = f"/api/v1/jobs/{job.pk}"
    return {
        "id": str(job.pk),
        "name": job.name,
        "state": job.state,
        "user": job.user.username,
        "project": job.project.slug,
        "finished_at": job.finished_at,
        "logs": f"{base}/logs",
        "metrics": f"{base}/metrics",
        "url": base,
    }


def _attempt_ref(attempt) -> dict:
    return {
        "id": str(attempt.pk),
        "number": attempt.number,
        "state": attempt.state,
        "nodes": attempt.nodes,
        "started_at": attempt.started_at,
        "ended_at": attempt.ended_at,
        "exit_code": attempt.exit_code,
        "logs": f"/api/v1/jobs/{attempt.job_id}/logs?attempt={attempt.number}",
    }


def version_lineage(*, actor: Actor, version: ModelVersion) -> dict:
    """From a version back: its job, the job's attempts (logs links), the metrics it carries,
    the dataset versions it came from (given at registration, and those its attempt read)."""
    model_visible(actor, version.model)
    from apps.datasets.models import DatasetVersion

    job = None
    attempts = []
    read_by: dict = {}  # attempt id -> ids of the dataset versions it read
    if version.source_job_id:
        # the job's attempts with their job and the dataset versions each read: one query
        job_attempts = _attempts_of_a_job().filter(job_id=version.source_job_id)
        job_attempts = list(job_attempts.order_by("number"))
        if job_attempts:
            job = job_attempts[0].job
        else:
            job = Job.objects.select_related("user", "project").get(pk=version.source_job_id)
        for attempt in job_attempts:
            ref = {**_attempt_ref(attempt), "source": attempt.pk == version.source_attempt_id}
            read_by[attempt.pk] = attempt.read_ids
            ref["dataset_versions"] = [str(pk) for pk in attempt.read_ids]
            attempts.append(ref)
    # given at registration, and those the source attempt read: one query for both
    wanted = Q(model_versions=version) | Q(pk__in=read_by.get(version.source_attempt_id, []))
    datasets = {
        dv.pk: dv
        for dv in DatasetVersion.objects.filter(wanted)
        .select_related("dataset")
        .distinct()
        # not the default ordering: it sorts through the project and the tenant, two joins
        .order_by("dataset__name", "number", "pk")
    }
    return {
        "version": version_ref(version),
        "job": _job_ref(job) if job is not None else None,
        "attempt": str(version.source_attempt_id) if version.source_attempt_id else None,
        "attempts": attempts,
        "metrics": version.metrics,
        "params": version.params,
        "dataset_versions": [_dataset_version_ref(dv) for dv in datasets.values()],
        "inference_jobs": _inference_jobs(actor=actor, version=version),
    }


def versions_for_lineage(model: RegisteredModel):
    """The model's versions with what a lineage shows of them, each with
    `read_by_inference`, read in the same query: a lineage without inference jobs (the usual
    case) then looks for none."""
    return _versions_with_inference_flag().filter(model=model)


# Querysets built once a process, before their filter: their annotations cost more to
# resolve than PostgreSQL takes to run them. Never evaluated: callers filter a copy.


@functools.cache
def _versions_with_inference_flag():
    attempts = JobAttempt.objects.filter(model_version=OuterRef("pk"))
    shown = ("model_id", "number", "state", "stage", "source_job_id", "source_attempt_id")
    rows = ModelVersion.objects.only(*shown, "metrics", "params")
    return rows.annotate(read_by_inference=Exists(attempts))


@functools.cache
def _attempts_of_a_job():
    """Attempts with their job and the ids of the dataset versions each read (`read_ids`)."""
    read = JobAttempt.dataset_versions.through.objects.filter(jobattempt=OuterRef("pk"))
    rows = JobAttempt.objects.select_related("job__user", "job__project")
    return rows.annotate(read_ids=ArraySubquery(read.order_by("pk").values("datasetversion_id")))


def _inference_jobs(*, actor: Actor, version: ModelVersion) -> list[dict]:
    """The batch inference jobs whose attempts read `version`, with the dataset versions
    those attempts wrote (their predictions)."""
    if getattr(version, "read_by_inference", True) is False:
        return []
    jobs: dict = {}
    for attempt in (
        JobAttempt.objects.visible_to(actor)
        .filter(model_version=version)
        .select_related("job__user", "job__project")
        .prefetch_related("written_dataset_versions__dataset", "dataset_versions__dataset")
        .order_by("job__created_at", "number")
    ):
        entry = jobs.setdefault(
            attempt.job_id, {**_job_ref(attempt.job), "attempts": [], "output_dataset_versions": []}
        )
        entry["attempts"].append(
            {
                **_attempt_ref(attempt),
                "dataset_versions": [str(dv.pk) for dv in attempt.dataset_versions.all()],
            }
        )
        entry["output_dataset_versions"] += [
            _dataset_version_ref(dv) for dv in attempt.written_dataset_versions.all()
        ]
    return list(jobs.values())


def dataset_version_lineage(*, actor: Actor, dataset_version) -> dict:
    """From a dataset version forward: every job whose attempts read it, and every model
    version that came from it (named at registration, or registered from such an attempt)."""
    from apps.datasets.models import DatasetVersion

    dv = (
        DatasetVersion.objects.visible_to(actor)
        .select_related("dataset", "source_attempt__job__user", "source_attempt__job__project")
        .select_related("source_attempt__model_version__model")
        .get(pk=dataset_version.pk)
    )
    jobs: dict = {}
    attempt_ids = []
    for attempt in (
        JobAttempt.objects.visible_to(actor)
        .filter(dataset_versions=dv)
        .select_related("job__user", "job__project")
        .order_by("job__created_at", "number")
    ):
        attempt_ids.append(attempt.pk)
        entry = jobs.setdefault(attempt.job_id, {**_job_ref(attempt.job), "attempts": []})
        entry["attempts"].append(_attempt_ref(attempt))
    versions = (
        ModelVersion.objects.visible_to(actor)
        .filter(Q(dataset_versions=dv) | Q(source_attempt_id__in=attempt_ids))
        .select_related("model")
        .distinct()
        .order_by("model__name", "number")
    )
    written_by = None
    if dv.source_attempt_id:  # a job's output (batch inference): its model and inputs
        source = dv.source_attempt
        model = source.model_version
        written_by = {
            **_job_ref(source.job),
            "attempt": str(dv.source_attempt_id),
            "attempt_number": source.number,
            "model_version": version_ref(model) if model is not None else None,
            "dataset_versions": [
                _dataset_version_ref(read)
                for read in source.dataset_versions.select_related("dataset").order_by("pk")
            ],
        }
    return {
        "dataset_version": _dataset_version_ref(dv),
        "written_by": written_by,
        "jobs": list(jobs.values()),
        "model_versions": [version_ref(v) for v in versions],
    }
