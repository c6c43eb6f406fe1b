"""Where a job's files live in its tenant's tree on the storage shared with the compute nodes
(the layout: apps/identity/storage.py)."""

import os
import time
from pathlib import Path

from apps.identity.storage import project_root


def job_dir(job) -> Path:
    return project_root(job.project) / "jobs" / str(job.id)


def checkpoint_dir(job) -> Path:
    return job_dir(job) / "checkpoints"


def attempt_dir(job, number: int) -> Path:
    return job_dir(job) / f"attempt-{number}"


def exit_file(job, number: int) -> Path:
    """Where the launcher leaves the program's exit status once it has ended."""
    return attempt_dir(job, number) / "exit-status"


def exit_status(job, number: int) -> int | None:
    """The exit status the attempt's launcher left, or None (not ended, or not written). The
    launcher writes it in one write, its newline last: a status without one is being written
    (read again once, shortly) or was cut off. The file is the job's user's: a link is not
    followed, and only a small number is read."""
    for pause in (0.0, 0.05):
        time.sleep(pause)
        try:
            fd = os.open(exit_file(job, number), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            raw = os.read(fd, 16)
        except OSError:
            return None
        finally:
            os.close(fd)
        if raw.endswith(b"\n"):
            text = raw.decode("ascii", "replace").strip()
            return int(text) if text.isdigit() and int(text) < 256 else None
    return None


def latest_checkpoint(directory: str) -> str:
    """The newest checkpoint in a job's directory: the file named in `latest` if the job
    wrote one, else the newest file by modification time; '' when there is none."""
    path = Path(directory)
    marker = path / "latest"
    try:
        name = marker.read_text().strip()
    except OSError:
        name = ""
    if name and (path / name).is_file():
        return str(path / name)
    try:
        files = [
            p
            for p in path.iterdir()
            if p.is_file() and p.name != "latest" and not p.name.startswith(".")
        ]
    except OSError:
        return ""
    return str(max(files, key=lambda p: p.stat().st_mtime)) if files else ""
