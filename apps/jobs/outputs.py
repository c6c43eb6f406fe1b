"""A succeeded job's outputs: the tasks sent for them once it succeeds, and the model version
registered from what a training job left at its spec's `register_model` (with its metrics,
parameters and the dataset versions it read); an inference job's predictions become a dataset
version in apps/jobs/inference.py (output_register)."""

from celery import current_app
from django.db import transaction

from apps.jobs import extras, paths
from apps.jobs.models import JobAttempt
from apps.jobs.states import State
from apps.registry.aliases import alias_set
from apps.registry.models import ModelVersion, RegisteredModel, VersionState
from apps.registry.trees import version_import
from apps.registry.validation import METRIC_NAME_RE
from apps.registry.versions import next_version
from apps.tenancy.audit import audit_record

# spec option -> the worker's task that takes a succeeded job's output in (apps/jobs/tasks.py)
ON_SUCCESS_TASKS = {
    "register_model": "jobs.register_model",
    "output_dataset": "jobs.inference_output",
}
SECRET_OPTION_WORDS = ("token", "key", "secret", "password")


def outputs_send(*, attempt: JobAttempt) -> None:
    """After commit, send the tasks that take in what a succeeded job wrote (its model, its
    predictions), by name."""
    pk = str(attempt.pk)
    for option, task in ON_SUCCESS_TASKS.items():
        if attempt.job.spec.get(option):
            transaction.on_commit(lambda task=task: current_app.send_task(task, args=[pk]))


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


def model_register(*, attempt: JobAttempt) -> ModelVersion | None:
    """Register what a succeeded training job left at its spec's `register_model.path` (inside
    the job's directory) as a new version, with its metrics (the last value of each), its
    parameters (the command line's options) and the dataset versions the attempt read; move
    the alias if the spec names one. Once per attempt, however often it runs."""
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
        metrics = extras.latest_metrics(job=job)
        source = paths.job_dir(job) / options.get("path", "model")
        version = next_version(
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
