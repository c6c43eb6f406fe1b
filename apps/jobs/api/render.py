"""A just-submitted job's response as a plain dict, equal to what JobSerializer and
JobDetailSerializer give for it (tests/jobs/test_query_counts.py compares them), from the
objects the submission wrote: no query, and none of DRF's per-field work on the hot path.

Only for a job whose attempts and events are known in full (services.Submitted.current):
such a job has no failure signatures yet, no expected start, and its first attempt no
dataset versions, dataset stages or model version (the dispatcher records those later)."""

from rest_framework.fields import DateTimeField

_datetime = DateTimeField()  # the API's datetime format and time zone


def _when(value) -> str | None:
    return _datetime.to_representation(value) if value else None


def job_row(job) -> dict:
    """JobSerializer's fields."""
    return {
        "id": str(job.id),
        "name": job.name,
        "kind": job.kind,
        "project": str(job.project_id),
        "project_slug": job.project.slug,
        "user": job.user.username,
        "state": job.state,
        "state_reason": job.state_reason,
        "queue_position": job.queue_position,
        "expected_start": None,  # the next control pass makes it (apps/jobs/estimates.py)
        "priority": job.priority,
        "labels": job.labels,
        "gpus": job.gpus,
        "cpus": job.cpus,
        "memory_mb": job.memory_mb,
        "cluster": job.cluster.name if job.cluster_id else None,
        "partition": job.partition,
        "placement_reason": job.placement_reason,
        "restart_count": job.restart_count,
        "cancel_requested": job.cancel_requested,
        "checkpoint_dir": job.checkpoint_dir,
        "latest_checkpoint": job.latest_checkpoint,
        "exit_code": job.exit_code,
        "created_at": _when(job.created_at),
        "admitted_at": _when(job.admitted_at),
        "started_at": _when(job.started_at),
        "finished_at": _when(job.finished_at),
        "signatures": [],
    }


def _attempt(attempt) -> dict:
    return {
        "id": str(attempt.id),
        "number": attempt.number,
        "state": attempt.state,
        "backend_id": attempt.backend_id,
        "backend_state": attempt.backend_state,
        "backend_reason": attempt.backend_reason,
        "nodes": attempt.nodes,
        "excluded_nodes": attempt.excluded_nodes,
        "resume_from": attempt.resume_from,
        "submitted_at": _when(attempt.submitted_at),
        "started_at": _when(attempt.started_at),
        "ended_at": _when(attempt.ended_at),
        "exit_code": attempt.exit_code,
        "signal": attempt.signal,
        "reason": attempt.reason,
        "stdout_path": attempt.stdout_path,
        "stderr_path": attempt.stderr_path,
        "gpu_seconds": float(attempt.gpu_seconds),
        "cpu_seconds": float(attempt.cpu_seconds),
        "dataset_versions": [],
        "dataset_cache": [],
        "model_version": None,
    }


def job_detail(job, *, attempts: list, events: list) -> dict:
    """JobDetailSerializer's fields."""
    numbers = {attempt.pk: attempt.number for attempt in attempts}
    return {
        **job_row(job),
        "spec": job.spec,
        "attempts": [_attempt(attempt) for attempt in attempts],
        "events": [
            {
                "created_at": _when(event.created_at),
                "from_state": event.from_state,
                "to_state": event.to_state,
                "reason": event.reason,
                "attempt": numbers.get(event.attempt_id),
            }
            for event in events
        ],
    }
