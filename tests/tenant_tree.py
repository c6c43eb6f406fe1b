"""Acting in a tenant's tree as a job would: a shell line run as a job-range uid with no group
of the platform (tests of what the platform reads there)."""

import subprocess
from pathlib import Path


def as_job(script: str, cwd: Path | str, *, uid: int) -> None:
    subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c", script],
        cwd=cwd,
        check=True,
    )
