"""A job's attempts: the next ones opened, each resuming from its job's latest checkpoint."""

from django.utils import timezone

from apps.core.bulk import bulk_update
from apps.jobs import paths
from apps.jobs.models import AttemptState, Job, JobAttempt


def attempt_open(*, job: Job, reason: str = "") -> JobAttempt:
    """A new attempt for a job, resuming from its latest checkpoint, avoiding failed nodes."""
    return attempts_open(jobs=[job], reason=reason)[0]


def attempts_open(*, jobs: list[Job], reason: str = "") -> list[JobAttempt]:
    """New attempts for many jobs in one write: each resumes from its job's latest checkpoint
    and inherits the nodes its previous attempt had to avoid."""
    previous = {
        row["job_id"]: row
        for row in JobAttempt.objects.filter(job__in=jobs)
        .order_by("job_id", "-number")
        .distinct("job_id")
        .values("job_id", "number", "excluded_nodes")
    }
    attempts, changed = attempts_build(jobs=jobs, previous=previous, reason=reason)
    JobAttempt.objects.bulk_create(attempts)
    if changed:
        bulk_update(changed, ["latest_checkpoint", "latest_checkpoint_at"])
    return attempts


def attempts_build(
    *, jobs: list[Job], previous: dict, reason: str = ""
) -> tuple[list[JobAttempt], list[Job]]:
    """The next attempts of `jobs` (unsaved), given each job's last attempt in `previous`
    (job id -> number, excluded_nodes; none for a job never tried); and the jobs whose
    latest checkpoint was found to have changed (updated in memory)."""
    attempts, changed = [], []
    for job in jobs:
        last = previous.get(job.pk)
        number = last["number"] + 1 if last else 1
        directory = paths.attempt_dir(job, number)  # made by the dispatcher, as the job's user
        latest = paths.latest_checkpoint(job.checkpoint_dir) if last else ""
        if latest and latest != job.latest_checkpoint:
            job.latest_checkpoint, job.latest_checkpoint_at = latest, timezone.now()
            changed.append(job)
        attempts.append(
            JobAttempt(
                job=job,
                number=number,
                state=AttemptState.QUEUED,
                reason=reason,
                excluded_nodes=list(last["excluded_nodes"]) if last else [],
                resume_from=latest,
                stdout_path=str(directory / "stdout.log"),
                stderr_path=str(directory / "stderr.log"),
            )
        )
    return attempts, changed
