"""No platform process but the privileged helper runs as root (docs/security.md, "The
privileged helper"): the portal's processes started as scripts/portal starts them (as the
platform account, through setpriv) dispatch and follow a real Slurm job to its end, and the
process table is read all the while."""

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings

from apps.identity.models import PosixAccount
from apps.jobs.models import Job
from apps.tenancy.models import Role
from scripts.devstack import free_port, wait_answering
from tests.jobs.conftest import output, submit
from tests.stack import portal_env

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"


def uids(pid: int) -> tuple[int, ...] | None:
    """The real, effective, saved and filesystem uids of a process (None: it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return tuple(int(n) for n in line.split()[1:])
    except OSError:
        return None
    return None


def session_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[3])  # state, ppid, pgrp, session


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.fixture
def portal(acme, slurm_cluster, tmp_path):
    """web, worker, beat and shipper as `scripts/portal start` runs them: as torus."""
    torus = pwd.getpwnam(settings.TORUS_SERVICE_USER)
    schedule = Path(tempfile.mkdtemp(prefix="torus-beat-", dir="/tmp"))
    os.chown(schedule, torus.pw_uid, torus.pw_gid)
    port = free_port()
    as_torus = ["setpriv", f"--reuid={torus.pw_uid}", f"--regid={torus.pw_gid}", "--init-groups"]
    commands = {
        "web": [BIN / "uvicorn", "config.asgi:application", "--port", str(port)],
        "worker": [BIN / "celery", "-A", "config", "worker", "--concurrency", "2", "-n",
                   "no-root@%h", "--loglevel", "INFO"],
        "beat": [BIN / "celery", "-A", "config", "beat", "--schedule", schedule / "schedule"],
        "shipper": [BIN / "python", "manage.py", "run_shipper"],
    }  # fmt: skip
    env = portal_env(TORUS_RECONCILE_SECONDS="1")
    procs = {}
    for name, command in commands.items():
        with open(tmp_path / f"{name}.log", "ab") as log:
            procs[name] = subprocess.Popen(
                [*as_torus, "--", *command],
                cwd=ROOT,
                env=env,
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    try:
        wait_answering(f"http://127.0.0.1:{port}/healthz", timeout=60, interval=0.2)
        yield procs, tmp_path
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(schedule, ignore_errors=True)


def test_no_platform_process_but_the_helper_runs_as_root(acme, portal):
    procs, logs = portal
    torus = pwd.getpwnam(settings.TORUS_SERVICE_USER).pw_uid
    helper = int((Path(settings.VAR_DIR) / "run" / "helper.pid").read_text())
    job_id = submit(acme.client(Role.MEMBER), acme.project, command=["bash", "-c", "id -u"])["id"]
    sessions = {proc.pid for proc in procs.values()}
    seen: dict[str, set] = {}
    deadline = time.monotonic() + 120
    while True:  # the portal's own processes drive the job: this test never dispatches
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            if session_of(pid) in sessions and (ids := uids(pid)) is not None:
                command = command_of(pid)
                assert 0 not in ids, f"{command} runs as {ids}"
                seen.setdefault(command, set()).update(ids)
        assert uids(helper) == (0, 0, 0, 0), "the helper is up, and root"
        for name, proc in procs.items():
            assert proc.poll() is None, (name, (logs / f"{name}.log").read_text()[-3000:])
        job = Job.objects.get(pk=job_id)
        if job.state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        assert time.monotonic() < deadline, (
            job.state,
            job.state_reason,
            (logs / "worker.log").read_text()[-3000:],
        )
        time.sleep(0.3)
    assert job.state == "SUCCEEDED", job.state_reason
    account = PosixAccount.objects.get(user=acme.users[Role.MEMBER])
    assert output(job).split() == [str(account.uid)]  # the job ran as its submitter
    kinds = ["bin/uvicorn", "bin/celery -A config worker", "bin/celery -A config beat"]
    kinds = dict.fromkeys([*kinds, "manage.py run_shipper"], 0)
    for command, ids in seen.items():
        for kind in kinds:
            if kind in command:
                kinds[kind] += 1
                assert ids == {torus}, (command, ids)
    assert all(kinds.values()), (kinds, list(seen))  # each of them was seen, as torus
