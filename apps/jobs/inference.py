"""Batch inference jobs (spec `kind: inference`): a model version in, dataset versions in
(the `datasets` field), predictions out as a new dataset version.

- At submit, `model` ("<name>:<n>", "<name>@<alias>", "<name>@latest" or a version id) is
  resolved to one ready version of the job's project that the submitter sees, and the spec
  keeps its id: a later alias move does not change what a restart reads.
- At dispatch, the attempt records the version (JobAttempt.model_version) and the job gets
  TORUS_MODEL_PATH: the version's sealed directory in the project tree, read in place. The
  files are 0440 and the directories 0550, owned by the platform account with the project's
  group, so the job's user reads them and cannot change them; nothing is copied.
- TORUS_OUTPUT_DIR is <job dir>/<output_dataset.path>; the job writes its predictions there.
- When the job succeeds the reconciler sends `jobs.inference_output` (tasks.py) to the root
  worker, which copies that directory into a new committed version of the output dataset
  (made if missing) with `source_attempt` set: once per attempt, however often it runs.
"""

import logging
import re
import uuid
from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework import serializers

from apps.core.actor import Actor
from apps.identity import tree
from apps.identity.storage import tenant_root
from apps.jobs import paths
from apps.jobs.models import JobAttempt

logger = logging.getLogger(__name__)

NUMBER_REF_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,99}):([1-9][0-9]{0,8})$")
ALIAS_REF_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,99})@([a-z][a-z0-9_-]{0,39})$")


def model_ref_problem(ref: str) -> str | None:
    """Why `ref` names no model version in any of the accepted forms, or None."""
    if NUMBER_REF_RE.match(ref) or ALIAS_REF_RE.match(ref):
        return None
    try:
        uuid.UUID(ref)
    except ValueError:
        return "Give '<model>:<version number>', '<model>@<alias>' or a version id."
    return None


def model_resolve(*, actor: Actor, project, ref: str):
    """The ready model version `ref` names in `project`, visible to the actor; a 400 at the
    field `model` otherwise (another tenant's version is 'not found', never told apart)."""
    from apps.registry.models import ModelAlias, ModelVersion, VersionState

    visible = ModelVersion.objects.visible_to(actor).filter(model__project=project)
    number, alias = NUMBER_REF_RE.match(ref), ALIAS_REF_RE.match(ref)
    if number:
        found = visible.filter(model__name=number.group(1), number=int(number.group(2)))
    elif alias and alias.group(2) == "latest":
        found = visible.filter(model__name=alias.group(1), state=VersionState.READY).order_by(
            "-number"
        )
    elif alias:
        pointed = ModelAlias.objects.filter(
            model__project=project, model__name=alias.group(1), name=alias.group(2)
        ).values("version_id")
        found = visible.filter(pk__in=pointed)
    else:
        found = visible.filter(pk=ref)
    version = found.select_related("model").first()
    if version is None:
        raise serializers.ValidationError({"model": ["No such model version in this project."]})
    if version.state != VersionState.READY:
        raise serializers.ValidationError(
            {"model": [f"Version {version.model.name}:{version.number} is {version.state}."]}
        )
    if version.storage != "posix":
        raise serializers.ValidationError(
            {"model": ["Only versions on the shared filesystem can be read by jobs."]}
        )
    return version


def model_path(version) -> Path:
    """Where a ready version's files lie, sealed, in its project's tree."""
    from apps.datasets.storage import storage_for

    return storage_for(version.storage).local_path(key=version.key_prefix)


def output_dir(job) -> Path:
    return paths.job_dir(job) / job.spec["output_dataset"]["path"]


def attempt_model_prepare(*, attempt: JobAttempt):
    """The model version an inference attempt reads, recorded on the attempt; None for other
    jobs. A version gone or no longer ready since submit: SubmitRejected."""
    from apps.compute.backends.base import SubmitRejected
    from apps.registry.models import ModelVersion, VersionState

    version_id = attempt.job.spec.get("model")
    if not version_id:
        return None
    version = (
        ModelVersion.objects.filter(
            pk=version_id, state=VersionState.READY, model__project_id=attempt.job.project_id
        )
        .select_related("model__project__tenant")
        .first()
    )
    if version is None:
        raise SubmitRejected("the job's model version no longer exists")
    if attempt.model_version_id != version.pk:
        attempt.model_version = version
        attempt.save(update_fields=["model_version", "updated_at"])
    return version


def _source_problem(source: Path, job) -> str | None:
    """The output directory as the job left it: a real directory inside the job's directory,
    opened from the tenant's root through no symlink (the job's user wrote the path; the
    one reader of tenants' trees, apps/identity/tree.py, follows none), holding a file."""
    relative = job.spec["output_dataset"]["path"]
    try:
        with tree.opened(tenant_root(job.project.tenant), source, directory=True) as top:
            if next(tree.walk_files(top, links="skip", unreadable="skip"), None) is None:
                return f"the job's {relative}/ directory holds no files"
    except tree.TreeRefused as exc:
        return f"{relative}/ passes through a symlink ({exc})"
    except (FileNotFoundError, NotADirectoryError):
        return f"the job wrote no {relative}/ directory"
    except OSError as exc:
        return f"the job's {relative}/ directory cannot be read ({exc.strerror})"
    return None


def output_register(*, attempt: JobAttempt):
    """Copy what a succeeded inference job wrote to its output directory into a new committed
    version of its output dataset, made by the job's user, written by this attempt. Returns
    the version, or None (not such a job, not succeeded, or nothing fit to take: audited as
    `job.output.failed`). Safe to run twice or at once: the attempt's row lock orders the
    runs and a later one finds the version the first committed."""
    from apps.core.exceptions import Conflict
    from apps.jobs.states import State
    from apps.tenancy.audit import audit_record

    job = attempt.job
    options = (job.spec or {}).get("output_dataset")
    if not options or job.state != State.SUCCEEDED or attempt.state != "SUCCEEDED":
        return None
    try:
        return _output_copy(attempt=attempt, options=options)
    except (ValidationError, Conflict) as exc:  # a storage quota passed is a Conflict
        messages = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
        error = "; ".join(messages)[:2000]
    audit_record(
        actor=None,
        user=job.user,
        tenant_id=job.tenant_id,
        action="job.output.failed",
        target=job,
        changes={"dataset": options["name"], "error": error},
    )
    logger.warning("job %s: no output dataset version: %s", job.pk, error)
    return None


def _output_copy(*, attempt: JobAttempt, options: dict):
    from apps.datasets import versions as datasets
    from apps.datasets.directories import version_register_directory
    from apps.datasets.errors import DatasetConflict
    from apps.datasets.models import Dataset, DatasetVersion, VersionState
    from apps.datasets.storage import storage_for
    from apps.datasets.tasks import project_storage_ensure

    job = attempt.job
    source = paths.job_dir(job) / options["path"]
    with transaction.atomic():
        JobAttempt.objects.select_for_update().get(pk=attempt.pk)
        done = (
            DatasetVersion.objects.filter(source_attempt=attempt, dataset__name=options["name"])
            .filter(dataset__project_id=job.project_id)
            .select_related("dataset__project__tenant")
            .first()
        )
        if done is not None and done.state == VersionState.COMMITTED:
            return done
        if done is not None:  # a run cut short before its commit
            datasets.version_discard(actor=None, version=done)
        problem = _source_problem(source, job)
        if problem:
            raise ValidationError(problem)
        project_storage_ensure(str(job.project_id))  # the worker is root: made in place
        dataset = Dataset.objects.filter(project=job.project, name=options["name"]).first()
        if dataset is None:
            try:
                dataset = datasets.dataset_create(
                    actor=None, project=job.project, name=options["name"]
                )
                Dataset.objects.filter(pk=dataset.pk).update(created_by=job.user)
            except DatasetConflict:  # made meanwhile (another job's output)
                dataset = Dataset.objects.get(project=job.project, name=options["name"])
        version = datasets.version_create(
            actor=None,
            dataset=dataset,
            source_attempt=attempt,
            notes=f"predictions of inference job {job.name} ({job.pk}), attempt {attempt.number}",
        )
        DatasetVersion.objects.filter(pk=version.pk).update(created_by=job.user)
        storage = storage_for(version.storage_kind)
        storage.delete(prefix=version.storage_prefix)  # what a run cut short left behind
        try:
            version = version_register_directory(actor=None, version=version, path=str(source))
            return datasets.version_commit(actor=None, version=version)
        except BaseException:
            storage.delete(prefix=version.storage_prefix)
            raise
