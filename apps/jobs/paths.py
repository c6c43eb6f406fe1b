"""Where a job's files live in its tenant's tree on the storage shared with the compute nodes
(the layout: apps/identity/storage.py)."""

import os
import stat
import time
from pathlib import Path

from django.conf import settings

from apps.identity import tree
from apps.identity.storage import project_root

EXIT_MAX_BYTES = 16
MARKER_MAX_BYTES = 4096


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
    (read again once, shortly) or was cut off. The file is the job's user's: it is read
    through the one reader of tenants' trees (no link followed from the job root on), and
    only a small number is read."""
    path = exit_file(job, number)
    for pause in (0.0, 0.05):
        time.sleep(pause)
        try:
            raw = tree.read_small(settings.TORUS_JOB_ROOT, path, limit=EXIT_MAX_BYTES)
        except OSError:
            return None
        if raw.endswith(b"\n"):
            text = raw.decode("ascii", "replace").strip()
            return int(text) if text.isdigit() and int(text) < 256 else None
    return None


def latest_checkpoint(directory: str) -> str:
    """The newest checkpoint in a job's directory: the file named in `latest` if the job
    wrote one, else the newest file by modification time; '' when there is none. The
    directory, the marker and the file it names are read from the job root without
    following a link (a job's `checkpoints/` swapped for a link into another tenant's tree
    reads as no checkpoint)."""
    try:
        with tree.opened(Path(settings.TORUS_JOB_ROOT), directory, directory=True) as fd:
            try:
                name = tree.read_small(fd, "latest", limit=MARKER_MAX_BYTES)
                parts = tree.parts_of(name.decode("utf-8", "replace").strip())
                os.close(tree.open_beneath(fd, "/".join(parts)))  # a regular file, no link
            except (OSError, ValueError):
                parts = []
            if parts:
                return os.path.join(directory, *parts)
            files = [
                (info.st_mtime, name)
                for name, info in tree.entries(fd)
                if stat.S_ISREG(info.st_mode) and name != "latest" and not name.startswith(".")
            ]
    except OSError:
        return ""
    return os.path.join(directory, max(files)[1]) if files else ""
