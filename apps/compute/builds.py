"""The background builds `make up` leaves running (scripts/builds): what is still being built
and how far, read from the status files the builder writes (no model: files only)."""

import json
import logging
import os
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

# A build waiting for the one before it, running, or stopped at a step (scripts/builds).
STATES = ("waiting", "building", "failed")


@dataclass(frozen=True)
class Build:
    name: str
    state: str
    step: int  # the step running (or failed), 0 while waiting
    steps: int
    step_name: str
    started: datetime | None
    finished: datetime | None
    cluster: str | None  # the cluster it registers when done
    error: str  # why it failed when the builder itself died
    log: str  # the builder's log file: for operators, never shown to other users

    def public(self) -> dict:
        """The build as every reader may see it (no log path)."""
        row = asdict(self)
        del row["log"]
        return row


def pending_builds(*, builds_dir: Path | None = None) -> list[Build]:
    """The builds not done (waiting, building or failed), by name. A build left waiting or
    building by a builder that no longer runs (killed, the machine restarted) is failed."""
    directory = Path(builds_dir or settings.TORUS_BUILDS_DIR)
    found = []
    for path in sorted(directory.glob("*.json")):
        try:
            raw = json.loads(path.read_text())
            build = _build(raw)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("unreadable build status %s: %s", path, exc)
            continue
        if build.state in STATES:
            found.append(build)
    return found


def still_building(name: str) -> str:
    """' (still being built: step 1 of 2, build the gateway)' while build `name` is waiting or
    building, for an error that its missing service causes; '' otherwise."""
    for build in pending_builds():
        if build.name == name and build.state != "failed":
            return f" (still being built: step {build.step} of {build.steps}, {build.step_name})"
    return ""


def _build(raw: dict) -> Build:
    state, error = raw["state"], ""
    pid = raw.get("pid")
    if state in ("waiting", "building") and pid and not _running(int(pid)):
        state, error = "failed", f"the builder (pid {pid}) stopped before this build was done"
    return Build(
        name=str(raw["name"]),
        state=state,
        step=int(raw["step"]),
        steps=int(raw["steps"]),
        step_name=str(raw["step_name"]),
        started=_time(raw.get("started")),
        finished=_time(raw.get("finished")),
        cluster=raw.get("cluster") or None,
        error=error,
        log=str(raw.get("log") or ""),
    )


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the builder runs as root, the portal as its own account
        return True
    return True
