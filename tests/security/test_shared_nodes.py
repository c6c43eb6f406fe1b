"""Shared nodes (issue 33 item 7): a procfs mounted with hidepid=invisible hides one uid's
processes from another, and the deploy check (torus.W033) and `manage.py torus_doctor` say
when a node's /proc does not. Real procfs mounts (this suite runs as root) and real
processes of job-range uids (TORUS_UID_RANGE), each refusal beside its allowed control."""

import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import override_settings

from apps.compute.doctor import PROC_CHECK_ID, proc_mount, proc_problem

VICTIM, VIEWER = 200101, 200102  # uids in TORUS_UID_RANGE (200000-299999)
MONITORING_GID = 300199


@pytest.fixture
def procfs():
    """mount(options) -> a fresh procfs mount point with these options (in a directory the
    job uids can reach); unmounted after."""
    made, top = [], Path(tempfile.mkdtemp(prefix="torus-proc-"))
    top.chmod(0o755)

    def mount(options: str | None) -> str:
        point = top / f"proc-{len(made)}"
        point.mkdir()
        argv = ["mount", "-t", "proc", *(["-o", options] if options else []), "proc", str(point)]
        subprocess.run(argv, check=True, capture_output=True)
        made.append(point)
        return str(point)

    yield mount
    for point in reversed(made):
        subprocess.run(["umount", str(point)], check=True)
        point.rmdir()
    top.rmdir()


@pytest.fixture
def victim():
    """A process of another job-range uid, with a secret on its command line."""
    marker = f"sleep-{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen(
        ["setpriv", f"--reuid={VICTIM}", f"--regid={VICTIM}", "--clear-groups", "--",
         "bash", "-c", 'exec -a "$0" sleep 60', marker],
    )  # fmt: skip
    deadline = time.monotonic() + 5
    while Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")[0] != marker.encode():
        assert time.monotonic() < deadline, "the victim did not start"
        time.sleep(0.02)
    yield process.pid, marker
    process.kill()
    process.wait()


def look(proc: str, pid: int, *, uid: int, groups: list[int] | None = None) -> str:
    """What uid (with these supplementary groups) reads of `pid`'s command line in `proc`,
    or 'absent' when the process is not there to it; also proves it sees its own."""
    group_args = [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    script = (
        f'test -d {proc}/self || {{ echo "no self"; exit 3; }}; '
        f"if test -e {proc}/{pid}; then tr '\\0' ' ' < {proc}/{pid}/cmdline; else echo absent; fi"
    )
    done = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", *group_args, "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_a_job_uid_cannot_see_another_uids_process_under_hidepid(procfs, victim):
    pid, marker = victim
    plain, hidden = procfs(None), procfs("hidepid=invisible")
    # the control: on a /proc without hidepid, another tenant's command line is in plain sight
    assert look(plain, pid, uid=VIEWER).startswith(marker)
    # under hidepid=invisible the process is not there at all (the viewer still sees itself)
    assert look(hidden, pid, uid=VIEWER) == "absent"
    assert not proc_problem(proc=hidden) and proc_problem(proc=plain)


def test_gid_lets_the_monitoring_group_see_every_process(procfs, victim):
    pid, marker = victim
    hidden = procfs(f"hidepid=invisible,gid={MONITORING_GID}")
    assert look(hidden, pid, uid=VIEWER, groups=[MONITORING_GID]).startswith(marker)
    assert look(hidden, pid, uid=VIEWER) == "absent"  # the same uid outside the group
    assert proc_mount(proc=hidden).options["gid"] == str(MONITORING_GID)


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        (None, "without hidepid"),
        ("hidepid=off", "without hidepid"),
        ("hidepid=noaccess", "hidepid=noaccess"),
        ("hidepid=invisible", None),
        ("hidepid=2", None),  # the number older kernels take: shown as invisible
        ("hidepid=ptraceable", None),
    ],
)
def test_the_deploy_check_warns_on_a_proc_that_shows_other_users(procfs, options, warned):
    proc = procfs(options)
    with override_settings(TORUS_PROC_PATH=proc):
        found = [
            m
            for m in checks.run_checks(include_deployment_checks=True, tags=["security"])
            if m.id == PROC_CHECK_ID
        ]
        outside_deploy = [m for m in checks.run_checks(tags=["security"]) if m.id == PROC_CHECK_ID]
    assert outside_deploy == []  # a deploy check only
    if warned is None:
        assert found == []
    else:
        (message,) = found
        assert message.level == checks.WARNING and warned in message.msg
        assert "hidepid=invisible" in message.hint


def test_the_check_names_a_path_that_is_not_a_procfs(tmp_path):
    assert proc_problem(proc=str(tmp_path)) == f"{tmp_path} is not a procfs mount point"


def test_torus_doctor_fails_on_a_plain_proc_and_passes_a_hidden_one(procfs, capsys):
    with pytest.raises(CommandError, match=f"{PROC_CHECK_ID}: .* without hidepid"):
        call_command("torus_doctor", "--proc", procfs(None))
    call_command("torus_doctor", "--proc", procfs(f"hidepid=invisible,gid={MONITORING_GID}"))
    out = capsys.readouterr().out
    assert "hidepid=invisible" in out and f"group {MONITORING_GID} sees every process" in out
