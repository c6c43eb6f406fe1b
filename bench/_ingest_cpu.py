"""bench/ingest.py's CPU accounting: processes by name, their trees, the services' CPU."""

import contextlib
import os
import subprocess
from pathlib import Path

from _common import VAR, process_cpu_seconds
from _ingest_es import es_cpu_seconds


def tree_cpu_seconds(pidfile: Path, name: str) -> float | None:
    """CPU of a daemon and its children, live and exited: the parent's utime+stime+cutime+
    cstime (exited children it reaped) plus each live child's utime+stime (PostgreSQL's
    backends). None if it cannot be found."""
    pid = None
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().split()[0])
    if pid is None or not Path(f"/proc/{pid}").is_dir():
        found = pids_of(name)
        pid = min(found) if found else None
    if pid is None:
        return None
    try:
        total = process_cpu_seconds(pid)
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def services_cpu() -> dict:
    """CPU seconds so far of Elasticsearch, PostgreSQL and Redis (deltas are what a phase cost
    them, and anything else that used them meanwhile)."""
    run = VAR / "run"
    return {
        "es": es_cpu_seconds(),
        "pg": tree_cpu_seconds(run / "postgres.pid", "postgres"),
        "redis": tree_cpu_seconds(run / "redis.pid", "redis-server"),
    }


def services_delta(before: dict) -> dict:
    after = services_cpu()
    return {
        key: round(after[key] - before[key], 2)
        if after[key] is not None and before[key] is not None
        else None
        for key in before
    }


def pids_of(name: str) -> list[int]:
    argv = ["pgrep", "-x", name]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    return [int(p) for p in out.stdout.split()]


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _pids_with(word: str) -> list[int]:
    argv = ["pgrep", "-f", word]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    return [int(p) for p in out.stdout.split() if int(p) != os.getpid()]
