"""Slurm's words read into the platform's: job states, node health, times, GRES counts, job
ids' order, exit statuses and sstat's usage."""

from datetime import UTC, datetime

from apps.compute.backends.base import JobUsage

# Slurm's job state words -> the attempt states of apps/jobs/models.py.
OUTCOMES = {
    "PENDING": "SUBMITTED",
    "CONFIGURING": "SUBMITTED",
    "REQUEUED": "SUBMITTED",
    "REQUEUE_FED": "SUBMITTED",
    "REQUEUE_HOLD": "SUBMITTED",
    "RESV_DEL_HOLD": "SUBMITTED",
    "SUSPENDED": "RUNNING",
    "RUNNING": "RUNNING",
    "COMPLETING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "SIGNALING": "RUNNING",
    "COMPLETED": "SUCCEEDED",
    "FAILED": "FAILED",
    "OUT_OF_MEMORY": "FAILED",
    "SPECIAL_EXIT": "FAILED",
    "CANCELLED": "CANCELLED",
    "REVOKED": "CANCELLED",
    "TIMEOUT": "TIMEOUT",
    "DEADLINE": "TIMEOUT",
    "NODE_FAIL": "NODE_FAIL",
    "BOOT_FAIL": "NODE_FAIL",
    "PREEMPTED": "PREEMPTED",
}

# Node state words of a node that cannot run work: its attempts are restarted elsewhere.
UNHEALTHY_NODE_WORDS = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "UNKNOWN")


def epoch_time(value) -> datetime | None:
    """A Unix time from slurmrestd (a number, or a {set, number} of newer APIs) as a datetime."""
    if isinstance(value, dict):  # newer API versions wrap numbers
        value = value.get("number") if value.get("set", True) else None
    if not value:
        return None
    return datetime.fromtimestamp(int(value), tz=UTC)


def job_order(job_id: str) -> int:
    """Slurm's job ids grow: the highest is the newest (an array task '12_3' counts as 12)."""
    head = str(job_id).split("_")[0].split("+")[0]
    return int(head) if head.isdigit() else 0


def node_healthy(state: str) -> bool:
    """Whether a node's state words name no fault (down, drained, failing, unreachable)."""
    return not any(word in state.upper() for word in UNHEALTHY_NODE_WORDS)


def wait_status(raw) -> tuple[int | None, int | None]:
    """slurmrestd's exit_code is the raw wait status: exit code << 8 | signal."""
    if raw is None:
        return None, None
    raw = int(raw)
    return raw >> 8, (raw & 0x7F) or None


def parse_gres(text: str) -> dict[str, dict[str, int]]:
    """'gpu:a100:4(S:0-1),gpu:2' -> {'gpu': {'a100': 4, '': 2}} (counts only)."""
    result: dict[str, dict[str, int]] = {}
    for item in filter(None, (text or "").split(",")):
        item = item.split("(")[0]
        fields = item.split(":")
        if len(fields) < 2 or not fields[-1].isdigit():
            continue
        name, count = fields[0], int(fields[-1])
        kind = fields[1] if len(fields) == 3 else ""
        result.setdefault(name, {})
        result[name][kind] = result[name].get(kind, 0) + count
    return result


def time_limit_minutes(value) -> int | None:
    """A job's time limit in minutes, None for none (infinite, unset or UNLIMITED)."""
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if value in (None, "", "UNLIMITED") or (isinstance(value, int) and value >= 0xFFFFFFFE):
        return None
    return int(value)


def parse_time(value: str) -> datetime | None:
    """A squeue or scontrol time ('2026-12-07T02:50:45', UTC) as a datetime; None for none."""
    if not value or value in ("Unknown", "None"):
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def slurm_seconds(text: str) -> float:
    """Slurm's elapsed time ('[D-]HH:MM:SS', 'MM:SS.mmm') in seconds; 0 for what is not one."""
    days, _, rest = text.rpartition("-")
    parts = rest.split(":")
    try:
        seconds = sum(float(p) * 60**i for i, p in enumerate(reversed(parts)))
        return seconds + (int(days) * 86400 if days else 0)
    except ValueError:
        return 0.0


def steps_usage(text: str) -> dict[str, JobUsage]:
    """sstat's parsable lines (JobID|NTasks|TRESUsageInTot, one per step) summed per job:
    CPU time and resident memory of every step, GPU utilisation where the nodes report it
    (gres/gpuutil, Slurm's NVML gathering)."""
    sums: dict[str, list] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 3 or not fields[2]:
            continue
        tres = dict(item.partition("=")[::2] for item in fields[2].split(","))
        job = sums.setdefault(fields[0].split(".")[0], [0.0, 0, None])
        job[0] += slurm_seconds(tres.get("cpu", ""))
        job[1] += int(tres["mem"]) if tres.get("mem", "").isdigit() else 0
        if tres.get("gres/gpuutil", "").isdigit():
            job[2] = max(job[2] or 0.0, float(tres["gres/gpuutil"]))
    return {job: JobUsage(cpu, memory, gpu) for job, (cpu, memory, gpu) in sums.items()}
