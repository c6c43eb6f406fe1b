"""What the usage samples (usage.py) say about a running job that does nothing:

- **stalled**: no output line and no CPU (or GPU) use for TORUS_STALLED_MINUTES: the job's
  subscribers are told (`stalled`), once until it does something again;
- **idle**, by its project's idle policy (Project.idle_minutes, idle_grace_minutes): its GPUs
  (its CPUs where the nodes report no GPU) unused and no `torus-heartbeat` line for
  idle_minutes: told (`idle`), then cancelled once the grace has passed unless it is busy again.

A deployment's replica (a `serve` job) is neither: it waits for requests, and its deployment's
health tells what matters (apps/serving).

State per attempt in one Redis hash (a day's expiry): the last sample's time (t), CPU seconds
(cpu) and output bytes (output); the last moment it did anything (active) and used its GPUs or
CPUs or beat its heart (busy); its last heartbeat (the shipper's); when it was told stalled or
idle."""

from django.conf import settings
from django.db import transaction

from apps.jobs import extras
from apps.jobs.models import Job, JobAttempt, Kind
from apps.jobs.services import job_cancel_locked
from apps.jobs.states import TERMINAL
from apps.jobs.transitions import job_transition
from apps.jobs.wake import request_cancel

HEARTBEAT = "torus-heartbeat"
TTL_SECONDS = 86400


def _key(attempt_id) -> str:
    return f"torus:usage:{attempt_id}"


def states(client, *, attempt_ids: list) -> dict:
    """{attempt id: its state} (one round trip)."""
    if client is None or not attempt_ids:
        return {}
    with client.pipeline(transaction=False) as pipe:
        for attempt_id in attempt_ids:
            pipe.hgetall(_key(attempt_id))
        found = pipe.execute()
    return {
        attempt_id: {name.decode(): float(value) for name, value in raw.items()}
        for attempt_id, raw in zip(attempt_ids, found, strict=True)
    }


def heartbeats_record(client, *, attempt_ids: list, now: float) -> None:
    """The shipper saw a `torus-heartbeat` line of these attempts (one round trip)."""
    if client is None or not attempt_ids:
        return
    pipe = client.pipeline(transaction=False)
    for attempt_id in attempt_ids:
        pipe.hset(_key(attempt_id), "heartbeat", now)
        pipe.expire(_key(attempt_id), TTL_SECONDS)
    pipe.execute()


def judge(client, *, attempt: JobAttempt, last: dict, sample: dict, now: float) -> list[str]:
    """Record the sample (`last`: the attempt's state before it); what it led to: "stalled",
    "idle" (told), "cancelled"."""
    first = "t" not in last
    cpu_used = sample["cores"] * 100 >= settings.TORUS_IDLE_CPU_PERCENT
    gpu_used = sample["gpu"] is not None and sample["gpu"] >= settings.TORUS_IDLE_GPU_PERCENT
    used = gpu_used if sample["gpu"] is not None else cpu_used
    wrote = sample["output"] > last.get("output", sample["output"])
    beat = last.get("heartbeat", 0.0) >= last.get("t", now)
    active = now if first or cpu_used or gpu_used or wrote else last.get("active", now)
    busy = now if first or used or beat else last.get("busy", now)
    new = {"t": now, "cpu": sample["cpu_seconds"], "output": sample["output"]}
    new |= {"active": active, "busy": busy}
    cleared, outcomes = [], []
    job = attempt.job
    if job.kind == Kind.SERVE:  # a replica waits for requests: its deployment's health says more
        _record(client, attempt_id=attempt.pk, new=new, cleared=["stalled", "idle"])
        return outcomes
    stalled_after = settings.TORUS_STALLED_MINUTES * 60
    if active == now:
        cleared.append("stalled")
    elif stalled_after and now - active >= stalled_after and "stalled" not in last:
        minutes = round((now - active) / 60)
        reason = f"no output line and no CPU use for {minutes} minutes"
        extras.notice(kind="stalled", reasons={str(job.pk): reason}, occurrence=f"{active:.0f}")
        new["stalled"] = now
        outcomes.append("stalled")
    project = job.project
    if busy == now or not project.idle_minutes:
        cleared.append("idle")
    elif "idle" not in last and now - busy >= project.idle_minutes * 60:
        what = "GPUs" if sample["gpu"] is not None else "CPUs"
        reason = (
            f"its {what} idle for {project.idle_minutes} minutes: cancelled in"
            f" {project.idle_grace_minutes} minutes unless it uses them or prints a"
            f" {HEARTBEAT} line (the project's idle policy)"
        )
        extras.notice(kind="idle", reasons={str(job.pk): reason}, occurrence=f"{busy:.0f}")
        new["idle"] = now
        outcomes.append("idle")
    elif "idle" in last and now - last["idle"] >= project.idle_grace_minutes * 60:
        minutes = round((now - busy) / 60)
        if _cancel(job=job, reason=f"cancelling: idle for {minutes} minutes (idle policy)"):
            outcomes.append("cancelled")
    _record(client, attempt_id=attempt.pk, new=new, cleared=cleared)
    return outcomes


def _record(client, *, attempt_id, new: dict, cleared: list[str]) -> None:
    if client is None:
        return
    pipe = client.pipeline(transaction=False)
    pipe.hset(_key(attempt_id), mapping=new)
    if cleared:
        pipe.hdel(_key(attempt_id), *cleared)
    pipe.expire(_key(attempt_id), TTL_SECONDS)
    pipe.execute()


def _cancel(*, job: Job, reason: str) -> bool:
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state in TERMINAL or job.cancel_requested:
            return False
        job_transition(job=job, to=job.state, reason=reason)
        if job_cancel_locked(job=job, reason=reason):
            transaction.on_commit(lambda: request_cancel(job.pk))
    return True
