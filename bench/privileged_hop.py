"""The privileged hop (issue 33): a job's three directories made through the privileged helper,
beside the same three made in process by root (`mkdir`, `chown`, `chmod`, as the worker did
before), N jobs each; CPU per job of the caller (time.process_time) and of the helper (/proc).

Run alone (as root, with `make services` up):  .venv/bin/python bench/privileged_hop.py [--jobs N]
The last stdout line is the result: {"benchmark": "privileged_hop", "metrics": {...}, ...}
"""

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, django_setup, log, write_result

UID, GID = 250000, 350000  # a job's user and project group, inside the default ranges


def helper_seconds() -> float:
    """CPU seconds of the running helper (a python3 named by its script) and its children."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"torus_helperd" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    sys.exit("no privileged helper running (platform/services/up helper)")


def job_dirs(base: Path, i: int) -> list[Path]:
    job = base / str(i)
    return [job, job / "checkpoints", job / "attempt-1"]


def in_process(base: Path, n: int) -> float:
    started = time.process_time()
    for i in range(n):
        for path in job_dirs(base, i):
            os.mkdir(path, 0o700)
            os.chown(path, UID, GID, follow_symlinks=False)
            os.chmod(path, 0o2750)  # noqa: S103 (as the job tree has it)
    return (time.process_time() - started) * 1000 / n


def through_helper(base: Path, n: int) -> tuple[float, float]:
    from apps.identity import privileged

    helper_before, started = helper_seconds(), time.process_time()
    for i in range(n):
        privileged.directories_make(
            dirs=[privileged.Directory(str(p), UID, GID, 0o2750) for p in job_dirs(base, i)]
        )
    caller = (time.process_time() - started) * 1000 / n
    return caller, (helper_seconds() - helper_before) * 1000 / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    n = parser.parse_args().jobs
    django_setup()
    from django.conf import settings

    root = Path(settings.DATA_DIR) / "test-jobs"  # one of the helper's roots
    bases = [root / f"bench-hop-{uuid.uuid4().hex[:8]}-{side}" for side in ("root", "helper")]
    for base in bases:
        base.mkdir(parents=True)
        os.chmod(base, 0o755)  # noqa: S103 (every job uid traverses it)
    try:
        before = in_process(bases[0], n)
        caller, helper = through_helper(bases[1], n)
    finally:
        for base in bases:
            shutil.rmtree(base, ignore_errors=True)
    metrics = {
        "jobs": n,
        "in_process_ms_per_job": round(before, 3),
        "helper_caller_ms_per_job": round(caller, 3),
        "helper_ms_per_job": round(helper, 3),
        "added_ms_per_job": round(caller + helper - before, 3),
    }
    log("privileged_hop", json.dumps(metrics))
    result = {"benchmark": "privileged_hop", "metrics": metrics, "peers": {}}
    log("privileged_hop", f"results in {write_result(result).relative_to(ROOT)}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
