"""bench/submit.py's constants, environment and Slurm helpers (sbatch, scancel, sdiag)."""

import re
import shutil
import subprocess
import sys
import time

from _common import ENV, VAR
from _common import log as _log

from apps.compute.envfile import read_env_file

OUR_IDS: list[str] = []  # every Slurm id the peers got, for the cleanup of an aborted run


def log(msg: str) -> None:
    _log("submit", msg)


TENANT_SLUG, PROJECT_SLUG, OWNER, TOKEN_NAME = "bench", "submit", "bench-owner", "bench-submit"
POLL_S = 0.05
WARM_JOBS = 16  # per freshly started web server, before its timed run (warm_up)
PASSES = 7  # reconcile passes measured per case; the least RPC count is reported (others
# talking to the same slurmctld, e.g. a test suite's control loop, only ever add to it)
SBATCH = shutil.which("sbatch") or "/usr/bin/sbatch"
# Names of the Slurm jobs this benchmark submits (used only to scancel leftovers of a killed run).
OUR_NAME = re.compile(r"^bench-(\d+|sbatch-\d+|restd-\d+|rpc-\d+)$")
# Processes whose CPU a Torus round is charged by name (beside the web server, the worker and
# the privileged helper, counted by pid with their children): Slurm's daemons, the stores.
CPU_BY_COMM = {
    "slurmrestd": ("slurmrestd",),
    "slurmctld": ("slurmctld",),
    "slurmd": ("slurmd", "slurmstepd"),
    "munged": ("munged",),
    "postgres": ("postgres",),
    "redis": ("redis-server",),
}


# -- environment ---------------------------------------------------------------------------


SLURM = read_env_file(VAR / "slurm" / "env")
SLURM_ENV = {**ENV, "SLURM_CONF": SLURM["SLURM_CONF"]}
SLURM_ENV.pop("SLURM_JWT", None)


# -- Slurm helpers -------------------------------------------------------------------------


def slurm(argv: list[str], check: bool = True) -> str:
    result = subprocess.run(argv, env=SLURM_ENV, capture_output=True, text=True, check=False)  # noqa: S603
    if check and result.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {result.stderr.strip()}")
    return result.stdout


def scancel(ids) -> None:
    ids = sorted({str(i) for i in ids if i}, key=int)
    for start in range(0, len(ids), 200):
        slurm(["scancel", *ids[start : start + 200]], check=False)


def queued_ids() -> set[str]:
    """Jobs still pending/running/completing in the controller."""
    return set(slurm(["squeue", "-h", "-o", "%i"], check=False).split())


def wait_gone(ids, timeout: float = 120.0) -> None:
    ids = {str(i) for i in ids if i}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = ids & queued_ids()
        if not left:
            return
        time.sleep(0.5)
    log(f"warning: {len(left)} of our Slurm jobs still queued after {timeout:.0f} s")


def controller_room(needed: int) -> None:
    """Refuse to start if our jobs would fill slurmctld's job table (MaxJobCount).

    slurmctld keeps every finished job for MinJobAge seconds (3600 here) and refuses all
    submissions, everyone's, once MaxJobCount records are held; one full run adds ~4000.
    """
    config = slurm(["scontrol", "show", "config"])
    limit = int(re.search(r"^MaxJobCount\s*=\s*(\d+)", config, re.M).group(1))
    age = re.search(r"^MinJobAge\s*=\s*(\d+)", config, re.M).group(1)
    held = len(slurm(["squeue", "-h", "-t", "all", "-o", "%i"]).split())
    room = limit - held - max(1000, limit // 10)  # leave room for everyone else
    log(f"slurmctld holds {held} of MaxJobCount={limit} job records; this run needs {needed}")
    if needed > room:
        sys.exit(
            f"not starting: {needed} more jobs would leave slurmctld too few of its {limit} job "
            f"records ({held} held; finished jobs are kept MinJobAge={age} s). Wait, or use --jobs."
        )


def sweep_leftovers() -> None:
    """scancel Slurm jobs that a killed earlier run of this benchmark left behind."""
    out = slurm(["squeue", "-h", "-o", "%i|%j|%k"], check=False)
    stale = []
    for line in out.splitlines():
        job_id, _, rest = line.partition("|")
        name, _, comment = rest.partition("|")
        if OUR_NAME.match(name) and (not name[6:].isdigit() or comment.startswith("torus:")):
            stale.append(job_id)
    if stale:
        log(f"scancel {len(stale)} leftover bench jobs from an earlier run")
        scancel(stale)
        wait_gone(stale)


def sdiag_rpcs() -> dict[str, int]:
    out = slurm(["sdiag"])
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    counts = {}
    for match in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", section, re.M):
        counts[match.group(1)] = int(match.group(2))
    return counts
