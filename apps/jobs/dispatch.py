"""The dispatcher: submits admitted attempts to their cluster, in batches, exactly once.

An attempt is claimed (QUEUED -> SUBMITTING) in one committed UPDATE before the backend is
called, so a duplicated dispatch finds nothing to claim. If a worker dies after the backend
accepted a job but before its id was recorded, the attempt stays SUBMITTING; after a grace
period the next pass looks its tag up on the cluster and adopts the orphan, or resubmits if
the cluster never got it.
"""

import base64
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.compute.backends import argv as launcher_argv
from apps.compute.backends import backend_class, for_cluster
from apps.compute.backends.base import (
    AssociationMissing,
    ClusterUnavailable,
    Submission,
    SubmitRejected,
)
from apps.compute.models import AcceleratorType, Cluster
from apps.core.exceptions import DirectoryUnavailable
from apps.core.passes import Pass, describe
from apps.identity.services import (
    IdentityError,
    JobIdentity,
    association_forget,
    job_identity,
)
from apps.identity.storage import OlderOwner, StorageError, job_tree_ensure, project_tree_ensure
from apps.jobs import cluster_limits, paths
from apps.jobs import submitted as submitted_write
from apps.jobs.inference import attempt_model_prepare, model_path, output_dir
from apps.jobs.kinds import kind_prepare, kind_secrets
from apps.jobs.models import AttemptState, Job, JobAttempt
from apps.jobs.priority import cluster_nice
from apps.jobs.staging import attempt_datasets_prepare, plan_path
from apps.jobs.states import State
from apps.jobs.transitions import events_announce, job_transition
from apps.secrets.services import secrets_for_attempt

logger = logging.getLogger(__name__)
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# how long a run of dispatch passes reuses an identity it prepared (its account, groups,
# association and project tree): a burst's passes prepare each (user, project) once
IDENTITY_REUSE_SECONDS = 30.0
# the dispatch pass's failures (apps/core/passes.py), one item per job: a job that cannot be
# prepared is held in the queue with the reason, and the pass goes on with the others
PASS = Pass("dispatch")


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def prepare_identity(*, job: Job, cluster: Cluster, backend) -> JobIdentity:
    """Who a job runs as (made on first need), its tenant's GPU limit on the cluster and its
    project's tree: once per (user, project) a dispatch pass."""
    identity = job_identity(job=job, backend=backend, cluster=cluster)
    cluster_limits.sync(cluster=cluster, backend=backend, tenants=[job.tenant], only_unset=True)
    project_tree_ensure(
        project=job.project, tenant_gid=identity.tenant_gid, project_gid=identity.gid
    )
    return identity


def prepare(attempt: JobAttempt, *, cluster: Cluster, identity: JobIdentity) -> None:
    """The attempt's directories in the tenant's tree owned by its user, its datasets and
    model, before the backend sees it."""
    job = attempt.job
    job_tree_ensure(
        job_dir=paths.job_dir(job),
        attempt_dir=paths.attempt_dir(job, attempt.number),
        checkpoint_dir=paths.checkpoint_dir(job),
        uid=identity.uid,
        gid=identity.gid,
    )
    attempt_datasets_prepare(attempt=attempt, cluster=cluster, identity=identity)
    attempt_model_prepare(attempt=attempt)
    kind_prepare(job=job)  # a kind an app above jobs owns (apps/jobs/kinds.py)


def accelerator_resources() -> dict[str, str]:
    """{GRES name: extended resource name} of every AcceleratorType (one query per pass)."""
    return dict(AcceleratorType.objects.values_list("gres_name", "resource_name"))


def build_submission(
    attempt: JobAttempt,
    cluster: Cluster,
    identity: JobIdentity,
    *,
    resources: dict[str, str] | None = None,
) -> Submission:
    """The backend request for an attempt. Every user value goes into `environment` as data.
    `resources`: accelerator_resources(), for backends that request extended resources."""
    job = attempt.job
    spec = job.spec
    r, command, env_spec = spec["resources"], spec["command"], spec["environment"]
    workdir = spec.get("working_dir") or str(paths.job_dir(job))
    environment = {
        "PATH": BASE_PATH,
        "LANG": "C.UTF-8",
        "HOME": str(paths.job_dir(job)),
        "USER": identity.user,
        "LOGNAME": identity.user,
        **{key: value for key, value in spec.get("env", {}).items() if isinstance(value, str)},
        "TORUS_JOB_ID": str(job.id),
        "TORUS_JOB_NAME": job.name,
        "TORUS_ATTEMPT_ID": str(attempt.id),
        "TORUS_ATTEMPT": str(attempt.number),
        "TORUS_EXIT_FILE": str(paths.exit_file(job, attempt.number)),
        "TORUS_PROJECT": job.project.slug,
        "TORUS_CHECKPOINT_DIR": job.checkpoint_dir,
        "TORUS_LAUNCHER": spec["distributed"]["launcher"],
        "TORUS_TASKS_PER_NODE": str(r["tasks_per_node"]),
        "TORUS_ENV_KIND": env_spec["type"],
        "TORUS_ENV_PATH": env_spec.get("path", ""),
    }
    environment.update(backend_class(cluster).job_environment(config=cluster.config or {}))
    if spec.get("datasets"):
        environment["TORUS_DATASETS_PLAN"] = str(plan_path(job, attempt.number))
    if attempt.resume_from:
        environment["TORUS_RESUME_FROM"] = attempt.resume_from
    if spec.get("register_model"):  # where the registry takes the model from on success
        environment["TORUS_MODEL_DIR"] = str(paths.job_dir(job) / spec["register_model"]["path"])
    if spec.get("model") and attempt.model_version_id:  # batch inference: read in place
        version = attempt.model_version
        environment["TORUS_MODEL_PATH"] = str(model_path(version))
        environment["TORUS_MODEL"] = f"{version.model.name}:{version.number}"
    if spec.get("output_dataset"):
        environment["TORUS_OUTPUT_DIR"] = str(output_dir(job))
    if "master_port" in spec["distributed"]:
        environment["TORUS_MASTER_PORT"] = str(spec["distributed"]["master_port"])
    # values nobody may read back: the project secrets the spec names (decrypted here, each
    # read audited) and a replica's engine key; never in `environment`, argv or the DB
    secrets = secrets_for_attempt(attempt=attempt)
    secrets.update(kind_secrets(job=job))  # a replica's engine key (apps/jobs/kinds.py)
    for key in secrets:
        environment.pop(key, None)
    if "argv" in command:
        environment["TORUS_ARGV"] = launcher_argv.encode(command["argv"])
    else:
        environment["TORUS_SCRIPT_B64"] = _b64(command["script"])
    return Submission(
        tag=attempt.tag,
        name=job.name,
        environment=environment,
        nodes=r["nodes"],
        tasks_per_node=r["tasks_per_node"],
        cpus_per_task=r["cpus_per_task"],
        memory_mb_per_node=r["memory"],
        time_limit_minutes=r["time_limit"],
        accelerator=r["accelerator"],
        accelerators_per_node=r["gpus_per_node"],
        accelerator_type=r.get("gpu_type"),
        partition=job.partition or None,
        exclude_nodes=tuple(attempt.excluded_nodes),
        working_dir=workdir,
        stdout_path=attempt.stdout_path,
        stderr_path=attempt.stderr_path,
        user=identity.user,
        uid=identity.uid,
        gid=identity.gid,
        account=identity.account,
        tenant=job.tenant.slug,
        project=job.project.slug,
        image=image_for(spec=spec, cluster=cluster),
        accelerator_resource=(resources or {}).get(r["accelerator"], ""),
        labels=submission_labels(job=job, attempt=attempt),
        nice=cluster_nice(job=job, cluster=cluster),
        kind=job.kind,
        secrets=secrets,
    )


def image_for(*, spec: dict, cluster: Cluster) -> str:
    """The container image an attempt runs in: the spec's (checked against the tenant's
    registries when submitted: apps/tenancy/images.py), else the cluster's default, if it runs
    containers at all."""
    if not cluster.supports_containers:
        return ""
    if spec["environment"]["type"] == "container":
        return spec["environment"]["image"]
    return str((cluster.config or {}).get("default_image", ""))


def submission_labels(*, job: Job, attempt: JobAttempt) -> dict[str, str]:
    """The spec's labels (validated as Kubernetes labels, none under a reserved prefix:
    apps/jobs/spec.py) and the platform's own torus.io/ ones, which win."""
    return {
        **job.spec.get("labels", {}),
        "torus.io/tenant": job.tenant.slug,
        "torus.io/project": job.project.slug,
        "torus.io/job": str(job.id),
        "torus.io/attempt": str(attempt.number),
    }


def mark_submitted(
    *, attempt_id, backend_id: str, adopted: bool = False, via: str = "cluster"
) -> None:
    mark_submitted_many(submitted={attempt_id: backend_id}, adopted=adopted, via=via)


def mark_submitted_many(*, submitted: dict, adopted: bool = False, via: str = "cluster") -> None:
    """Record backend ids ({attempt id: backend id}) and move their jobs to SUBMITTED, in one
    statement whatever the number (apps/jobs/submitted.py). `via`: the backend's display
    name, for the reason."""
    how = "adopted from the cluster" if adopted else "submitted"
    reasons = {pk: f"{how} as {via} job {backend_id}" for pk, backend_id in submitted.items()}
    if submitted:
        events_announce(
            events=submitted_write.record(reasons=reasons, backend_ids=submitted, at=timezone.now())
        )


def mark_rejected(*, attempt_id, message: str) -> None:
    with transaction.atomic():
        attempt = JobAttempt.objects.select_for_update().get(pk=attempt_id)
        job = Job.objects.select_for_update().get(pk=attempt.job_id)
        attempt.state, attempt.ended_at, attempt.reason = (
            AttemptState.FAILED,
            timezone.now(),
            message,
        )
        attempt.save(update_fields=["state", "ended_at", "reason", "updated_at"])
        if job.state == State.QUEUED:
            job_transition(
                job=job,
                to=State.FAILED,
                attempt=attempt,
                reason=f"the cluster refused the job: {message}",
            )


def release(*, attempt_id, message: str) -> None:
    """Back to the queue: the attempt could not be prepared now (directory or cluster down);
    the next pass tries again."""
    logger.warning("attempt %s not submitted: %s", attempt_id, message)
    JobAttempt.objects.filter(pk=attempt_id, state=AttemptState.SUBMITTING).update(
        state=AttemptState.QUEUED, submit_started_at=None
    )


def hold(*, attempt_id, job_id, reason: str) -> None:
    """Back to the queue with the reason its user sees (the job's state_reason): the attempt
    could not be prepared for an error nobody foresaw (an orphaned group row, a file in the
    way). Counted and logged once (PASS); every later pass tries it again, and a job that goes
    through clears its failure."""

    def mark(_error) -> None:
        JobAttempt.objects.filter(pk=attempt_id, state=AttemptState.SUBMITTING).update(
            state=AttemptState.QUEUED, submit_started_at=None
        )
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.state == State.QUEUED:
            job_transition(job=job, to=State.QUEUED, reason=reason)

    PASS.failed(key=f"job:{job_id}", error=reason, on_failure=mark)


def settle_held() -> None:
    """Clear the dispatch failures of jobs that no longer wait to be dispatched (submitted,
    cancelled, failed, gone): no query while none is open."""
    held = {key.removeprefix("job:") for key in PASS.open() if key.startswith("job:")}
    if held:
        waiting = Job.objects.filter(pk__in=_job_ids(held), state=State.QUEUED)
        waiting = {str(pk) for pk in waiting.values_list("pk", flat=True)}
        PASS.forget(keys=[f"job:{pk}" for pk in held - waiting])


def _job_ids(values) -> list:
    out = []
    for value in values:
        try:
            out.append(uuid.UUID(value))
        except ValueError:
            continue
    return out


def recover_submitting(*, cluster: Cluster, backend) -> int:
    """Adopt or release attempts left SUBMITTING by a dispatcher that died. One backend call."""
    grace = timezone.now() - timedelta(seconds=settings.TORUS_DISPATCH_GRACE_SECONDS)
    stale = list(
        JobAttempt.objects.filter(
            job__cluster=cluster, state=AttemptState.SUBMITTING, submit_started_at__lt=grace
        )
    )
    if not stale:
        return 0
    known = {job.tag: job for job in backend.jobs()}
    for attempt in stale:
        found = known.get(attempt.tag)
        if found is not None:
            mark_submitted(
                attempt_id=attempt.pk,
                backend_id=found.backend_id,
                adopted=True,
                via=backend.display_name,
            )
        else:
            JobAttempt.objects.filter(pk=attempt.pk, state=AttemptState.SUBMITTING).update(
                state=AttemptState.QUEUED, submit_started_at=None
            )
    return len(stale)


def claim(*, cluster: Cluster, limit: int) -> list:
    """Atomically move up to `limit` dispatchable attempts to SUBMITTING; their ids."""
    now = timezone.now()
    with transaction.atomic():
        ids = list(
            JobAttempt.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(job__cluster=cluster, state=AttemptState.QUEUED, job__state=State.QUEUED)
            .order_by("created_at")
            .values_list("pk", flat=True)[:limit]
        )
        JobAttempt.objects.filter(pk__in=ids).update(
            state=AttemptState.SUBMITTING, submit_started_at=now
        )
    return ids


class _NotPrepared(Exception):
    """The attempt could not be prepared for now (the directory or storage away): it goes
    back to the queue for a later pass."""


class _Held(Exception):
    """The attempt could not be prepared for an unforeseen error: it is held in the queue
    with the reason (hold) and tried again by later passes; the other attempts go on."""


_NOT_NOW = (DirectoryUnavailable, ClusterUnavailable, StorageError)


def dispatch_cluster(
    *, cluster_id, limit: int = 500, identities: dict | None = None, recover: bool = True
) -> int:
    """Submit every dispatchable attempt of a cluster; the number submitted.

    `identities`: kept by the caller across the passes of one run (apps/jobs/tasks.py), so
    that a burst of submissions prepares each (user, project) once, not once a pass; one
    prepared over IDENTITY_REUSE_SECONDS ago is prepared again. `recover`: adopt or release
    what a dead dispatcher left SUBMITTING first (a run's first pass does)."""
    cluster = Cluster.objects.get(pk=cluster_id)
    backend = for_cluster(cluster)
    if recover:
        try:
            recover_submitting(cluster=cluster, backend=backend)
        except ClusterUnavailable as exc:
            logger.warning("cluster %s unavailable: %s", cluster.name, exc)
            return 0
    reused = {} if identities is None else identities
    fresh_since = time.monotonic() - IDENTITY_REUSE_SECONDS
    known = {key: identity for key, (identity, at) in reused.items() if at > fresh_since}
    total, released = 0, False
    resources = accelerator_resources()
    while not released and (ids := claim(cluster=cluster, limit=limit)):
        attempts = list(
            JobAttempt.objects.filter(pk__in=ids).select_related(
                "job", "job__tenant", "job__project__tenant", "job__user"
            )
        )
        for attempt in attempts:  # the identities first, once each (they may create users)
            key = (attempt.job.user_id, attempt.job.project_id)
            if key not in known:
                try:
                    known[key] = prepare_identity(job=attempt.job, cluster=cluster, backend=backend)
                    reused[key] = (known[key], time.monotonic())
                except (IdentityError, SubmitRejected, *_NOT_NOW) as exc:
                    known[key] = exc  # each of its attempts says so below (this pass only)
                except Exception as exc:  # (one job's trouble, not the pass's)
                    known[key] = _Held(f"could not prepare its identity: {describe(exc)}")

        def submit(attempt):
            """Prepare and submit one attempt (in a pool thread: one attempt's directories
            and files are made while another's request is on the wire)."""
            try:
                try:
                    identity = known[(attempt.job.user_id, attempt.job.project_id)]
                    if isinstance(identity, Exception):
                        raise identity
                    prepare(attempt, cluster=cluster, identity=identity)
                    submission = build_submission(attempt, cluster, identity, resources=resources)
                except (IdentityError, SubmitRejected) as exc:
                    return attempt.pk, None, SubmitRejected(str(exc))
                except OlderOwner as exc:  # the user is told; an operator's purge frees it
                    return attempt.pk, None, _Held(f"could not prepare its directory: {exc}")
                except _NOT_NOW as exc:
                    return attempt.pk, None, _NotPrepared(str(exc))
                except _Held as exc:
                    return attempt.pk, None, exc
                except Exception as exc:  # (this attempt's, not the pass's)
                    return attempt.pk, None, _Held(f"could not be prepared: {describe(exc)}")
                try:
                    return attempt.pk, backend.submit(submission), None
                except AssociationMissing as exc:  # nothing started: made again, tried again
                    association_forget(
                        cluster=cluster, user=identity.user, account=identity.account
                    )
                    reused.pop((attempt.job.user_id, attempt.job.project_id), None)
                    return attempt.pk, None, _NotPrepared(str(exc))
                except (ClusterUnavailable, SubmitRejected) as exc:
                    return attempt.pk, None, exc
                except Exception as exc:  # (outcome unknown: recovered later)
                    return attempt.pk, None, ClusterUnavailable(describe(exc))
            finally:  # the pool's thread exits after the pass: its connection goes back
                connection.close()

        with ThreadPoolExecutor(max_workers=settings.TORUS_DISPATCH_THREADS) as pool:
            results = list(pool.map(submit, attempts))
        job_of = {attempt.pk: attempt.job_id for attempt in attempts}
        for attempt_id, _, error in results:
            if isinstance(error, _NotPrepared):
                release(attempt_id=attempt_id, message=str(error))
                released = True  # not claimed again in this pass
            elif isinstance(error, _Held):
                hold(attempt_id=attempt_id, job_id=job_of[attempt_id], reason=str(error))
                released = True
        accepted = {attempt_id: backend_id for attempt_id, backend_id, _ in results if backend_id}
        mark_submitted_many(submitted=accepted, via=backend.display_name)
        total += len(accepted)
        for attempt_id in accepted:
            PASS.succeeded(key=f"job:{job_of[attempt_id]}")
        for attempt_id, backend_id, error in results:
            if backend_id or isinstance(error, _NotPrepared | _Held):
                continue
            if isinstance(error, SubmitRejected):
                mark_rejected(attempt_id=attempt_id, message=str(error)[:1000])
            else:  # unknown outcome: stays SUBMITTING; recover_submitting decides later
                logger.warning("submit of attempt %s unconfirmed: %s", attempt_id, error)
        if len(ids) < limit or any(  # (fewer than asked: nothing is left to claim)
            error is not None and not isinstance(error, SubmitRejected | _NotPrepared | _Held)
            for _, _, error in results
        ):
            break
    settle_held()
    return total
