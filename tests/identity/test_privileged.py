"""The privileged helper (helper/torus_helperd.py, the one root process) through its client
(apps/identity/privileged.py), on the real daemon platform/services runs: every refusal
logged with its reason and nothing changed on disk, each beside an allowed request of the
same kind; callers other than root and the platform account refused; a directory swapped for
a link while the helper works on it; sbatch as the user on the real Slurm; Slurm tokens."""

import contextlib
import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import jwt
import pytest
from django.conf import settings

from apps.compute.backends import for_cluster
from apps.identity import privileged
from apps.jobs import dispatch
from apps.jobs.models import Job
from apps.tenancy.models import Role
from tests.jobs.conftest import slurm, submit

UID = settings.TORUS_UID_RANGE[1] - 7  # numbers in the ranges, as a job's files have
GID = settings.TORUS_GID_RANGE[1] - 7
HELPER_LOG = Path(settings.VAR_DIR) / "log" / "helper.log"
CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect": exc.strerror}))
    sys.exit(0)
s.sendall(sys.argv[2].encode() + b"\n")
print(s.makefile().readline())
"""


class HelperLog:
    """What the helper logs from now on."""

    def __init__(self):
        self.start = HELPER_LOG.stat().st_size

    def new(self) -> str:
        with open(HELPER_LOG, "rb") as handle:
            handle.seek(self.start)
            return handle.read().decode()


@pytest.fixture
def root(_job_root) -> Path:
    """The test's job root (below a helper root), made as the platform makes it."""
    privileged.directory_make(path=_job_root, uid=0, gid=0, mode=0o755)
    return _job_root


@pytest.fixture
def canary():
    """A directory outside every helper root, root's, that nothing may change."""
    path = Path(tempfile.mkdtemp(prefix="torus-canary-", dir="/tmp"))
    os.chmod(path, 0o755)
    (path / "keep").write_text("x")
    os.chmod(path / "keep", 0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def state(path: Path) -> tuple:
    info = os.lstat(path)
    names = sorted(os.listdir(path)) if stat.S_ISDIR(info.st_mode) else None
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode), names


def refused(call, log: HelperLog, reason: str) -> str:
    with pytest.raises(privileged.HelperRefused) as caught:
        call()
    assert reason in str(caught.value)
    assert reason in log.new(), "the refusal is logged with its reason"
    return str(caught.value)


def test_a_directory_for_a_uid_outside_the_range_is_refused(root):
    log = HelperLog()
    for uid in (1000, settings.TORUS_UID_RANGE[1] + 1):
        refused(
            lambda uid=uid: privileged.directory_make(
                path=root / "a", uid=uid, gid=GID, mode=0o750
            ),
            log,
            f"uid {uid} is neither root",
        )
    refused(
        lambda: privileged.directory_make(path=root / "a", uid=UID, gid=100, mode=0o750),
        log,
        "gid 100 is neither root",
    )
    assert not (root / "a").exists()
    # allowed: a uid and gid of the ranges
    assert privileged.directory_make(path=root / "a", uid=UID, gid=GID, mode=0o750)
    assert state(root / "a") == (UID, GID, 0o750, [])


def test_a_path_outside_the_roots_is_refused(root, canary):
    log = HelperLog()
    for path in (canary / "made", "/etc/torus-made", f"{root}/../escape", "relative/x"):
        refused(
            lambda path=path: privileged.directory_make(path=path, uid=0, gid=0, mode=0o755),
            log,
            "path",
        )
    refused(
        lambda: privileged.hand_over(path=canary / "keep", uid=UID, gid=GID, mode=0o640),
        log,
        "outside the helper's roots",
    )
    assert state(canary) == (0, 0, 0o755, ["keep"])
    assert state(canary / "keep")[:3] == (0, 0, 0o644)
    assert not os.path.exists("/etc/torus-made") and not (root.parent / "escape").exists()
    # allowed: below the root
    privileged.directory_make(path=root / "made", uid=0, gid=0, mode=0o755)
    assert state(root / "made") == (0, 0, 0o755, [])


def test_a_component_that_is_a_link_is_refused(root, canary):
    (root / "link").symlink_to(canary)
    (root / "real").mkdir()
    log = HelperLog()
    refused(
        lambda: privileged.directory_make(path=root / "link" / "x", uid=UID, gid=GID, mode=0o750),
        log,
        "component 'link' is a link",
    )
    refused(
        lambda: privileged.directory_make(
            path=root / "link", uid=UID, gid=GID, mode=0o750, enforce=True
        ),
        log,
        "is a link",
    )
    refused(
        lambda: privileged.hand_over(path=root / "link" / "keep", uid=UID, gid=GID, mode=0o640),
        log,
        "is a link",
    )
    refused(
        lambda: privileged.files_write(
            files=[(root / "link" / "planted", b"x")], uid=UID, gid=GID, mode=0o440
        ),
        log,
        "is a link",
    )
    assert state(canary) == (0, 0, 0o755, ["keep"])
    assert state(canary / "keep")[:3] == (0, 0, 0o644)
    # allowed: the same through a real directory
    privileged.directory_make(path=root / "real" / "x", uid=UID, gid=GID, mode=0o750)
    privileged.files_write(files=[(root / "real" / "f", b"data")], uid=UID, gid=GID, mode=0o440)
    assert state(root / "real" / "x") == (UID, GID, 0o750, [])
    assert state(root / "real" / "f")[:3] == (UID, GID, 0o440)
    assert (root / "real" / "f").read_bytes() == b"data"


def test_a_mode_that_is_not_allowed_is_refused(root):
    log = HelperLog()
    for mode in (0o777, 0o4755, 0o2777, 0o757):
        refused(
            lambda mode=mode: privileged.directory_make(
                path=root / "m", uid=UID, gid=GID, mode=mode
            ),
            log,
            f"mode {mode:o} is not one of the allowed",
        )
    (root / "f").write_text("x")
    refused(
        lambda: privileged.hand_over(path=root / "f", uid=UID, gid=GID, mode=0o4755),
        log,
        "mode 4755 is not one of the allowed",
    )
    refused(  # a directory mode for a file
        lambda: privileged.hand_over(path=root / "f", uid=UID, gid=GID, mode=0o2750),
        log,
        "not a file mode",
    )
    assert not (root / "m").exists() and state(root / "f")[:3] == (0, 0, 0o644)
    # allowed
    privileged.directory_make(path=root / "m", uid=UID, gid=GID, mode=0o2750)
    privileged.hand_over(path=root / "f", uid=UID, gid=GID, mode=0o640)
    assert state(root / "m")[:3] == (UID, GID, 0o2750)
    assert state(root / "f")[:3] == (UID, GID, 0o640)


def test_one_bad_entry_refuses_the_whole_request(root):
    """Every entry is checked before anything is made: nothing half-made."""
    dirs = [
        privileged.Directory(str(root / "first"), UID, GID, 0o750),
        privileged.Directory(str(root / "second"), 5, GID, 0o750),
    ]
    with pytest.raises(privileged.HelperRefused):
        privileged.directories_make(dirs=dirs)
    assert os.listdir(root) == []
    dirs[1] = privileged.Directory(str(root / "second"), UID, GID, 0o750)
    assert privileged.directories_make(dirs=dirs) == [str(root / "first"), str(root / "second")]


def as_uid(uid: int, gid: int, request: dict, *, groups: str = "") -> dict:
    """The helper's answer to `request` from a process of uid:gid (no supplementary groups
    but `groups`), or {"connect": error} when it cannot connect."""
    prefix = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    prefix += [f"--groups={groups}"] if groups else ["--clear-groups"]
    result = subprocess.run(
        [*prefix, "/usr/bin/python3", "-I", "-c", CLIENT, settings.TORUS_HELPER_SOCKET,
         json.dumps(request)],
        capture_output=True, text=True, timeout=30, check=True, cwd="/",
    )  # fmt: skip
    return json.loads(result.stdout)


def test_a_caller_other_than_root_or_the_platform_account_is_refused(root):
    torus = pwd.getpwnam(settings.TORUS_SERVICE_USER)
    request = {
        "verb": "dirs",
        "dirs": [{"path": str(root / "x"), "uid": 0, "gid": 0, "mode": 0o755}],
    }
    # a job's uid cannot even open the socket (0660 root:torus)
    assert as_uid(UID, GID, request) == {"connect": "Permission denied"}
    # one that could (it has the platform's group) is refused by its uid (SO_PEERCRED)
    log = HelperLog()
    answer = as_uid(UID, GID, request, groups=str(torus.pw_gid))
    assert answer == {
        "ok": False,
        "error": "refused",
        "reason": f"caller uid {UID} is neither root nor {settings.TORUS_SERVICE_USER}",
    }
    assert f"refused dirs from uid {UID}: caller uid {UID} is neither root" in log.new()
    assert not (root / "x").exists()
    # allowed: the platform account itself
    answer = as_uid(torus.pw_uid, torus.pw_gid, request)
    assert answer == {"ok": True, "changed": [str(root / "x")]}
    assert state(root / "x") == (0, 0, 0o755, [])


def test_a_directory_swapped_for_a_link_in_a_loop_never_moves_the_links_target(root, canary):
    """A user's directory (theirs to rename in) whose entry flips between a real directory
    and a link to a root-owned directory while the helper makes, re-applies and hands it
    over, and writes into it: the link's target keeps its owner, mode and content."""
    home = root / "home"
    privileged.directory_make(path=home, uid=UID, gid=GID, mode=0o750)
    target, spare = home / "d", home / "spare"
    stop = threading.Event()
    flips = 0

    def racer():
        nonlocal flips
        while not stop.is_set():
            with contextlib.suppress(FileExistsError):
                os.mkdir(spare)
            with contextlib.suppress(OSError):
                os.rename(spare, target)  # a real directory there...
            with contextlib.suppress(OSError):
                os.rename(target, home / f"gone-{uuid.uuid4().hex}")
            try:
                os.symlink(canary, target)  # ...then a link to the canary
                flips += 1
                os.unlink(target)
            except OSError:
                pass

    thread = threading.Thread(target=racer, daemon=True)
    thread.start()
    outcomes = {"ok": 0, "refused": 0, "failed": 0}
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            for call in (
                lambda: privileged.directory_make(
                    path=target, uid=UID, gid=GID, mode=0o2770, enforce=True,
                    platform_acl=True, default_acl=True,
                ),
                lambda: privileged.hand_over(path=target, uid=UID, gid=GID, mode=0o2750),
                lambda: privileged.files_write(
                    files=[(target / "keep", b"overwritten")], uid=UID, gid=GID, mode=0o440
                ),
            ):  # fmt: skip
                try:
                    call()
                    outcomes["ok"] += 1
                except privileged.HelperRefused:
                    outcomes["refused"] += 1
                except privileged.HelperFailed:  # the entry vanished mid-way: ENOENT
                    outcomes["failed"] += 1
    finally:
        stop.set()
        thread.join(timeout=10)
    assert flips > 50 and outcomes["ok"] > 10 and outcomes["refused"] > 10, (flips, outcomes)
    assert state(canary) == (0, 0, 0o755, ["keep"])
    assert state(canary / "keep")[:3] == (0, 0, 0o644)
    assert (canary / "keep").read_text() == "x"
    acl = subprocess.run(["getfacl", "-cp", str(canary)], capture_output=True, text=True)
    assert "torus" not in acl.stdout


def test_slurm_tokens_for_users_in_the_range_and_the_platform_account_only(acme, slurm_cluster):
    key = (Path(settings.VAR_DIR) / "slurm" / "jwt.key").read_bytes()
    job = Job.objects.get(pk=submit(acme.client(Role.MEMBER), acme.project, command=["true"])["id"])
    identity = dispatch.prepare_identity(
        job=job, cluster=slurm_cluster, backend=for_cluster(slurm_cluster)
    )
    log = HelperLog()
    for user in ("root", "nobody", "no-such-user", "a b"):
        with pytest.raises(privileged.HelperRefused):
            privileged.slurm_token(user=user)
    assert (
        "refused slurm-token from uid 0: user 'root' (uid 0) is outside the uid range" in log.new()
    )
    for user in (identity.user, settings.TORUS_SERVICE_USER):
        token = privileged.slurm_token(user=user)
        claims = jwt.decode(token, key, algorithms=["HS256"])
        assert claims["sun"] == user and 0 < claims["exp"] - claims["iat"] <= 3600
        assert privileged.slurm_token(user=user) is token  # kept until shortly before it expires
    # the key is Slurm's (root's) alone
    info = os.stat(Path(settings.VAR_DIR) / "slurm" / "jwt.key")
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)


def test_sbatch_runs_as_the_user_with_only_the_environment_it_is_given(acme, slurm_cluster):
    job = Job.objects.get(pk=submit(acme.client(Role.MEMBER), acme.project, command=["true"])["id"])
    identity = dispatch.prepare_identity(
        job=job, cluster=slurm_cluster, backend=for_cluster(slurm_cluster)
    )
    out = Path(settings.TORUS_JOB_ROOT) / "sbatch-out"
    privileged.directory_make(path=out, uid=identity.uid, gid=identity.gid, mode=0o750)
    options = [
        "--parsable", f"--account={identity.account}", "--job-name=helper-test", "--time=1",
        f"--chdir={out}", f"--output={out}/out.txt", "--nodes=1", "--no-requeue",
    ]  # fmt: skip
    script = '#!/bin/bash\nid -u; id -g; id -G\nprintf \'%s|\' "$SPACED" "$PATH" "$LANG"\n'
    environment = {"SPACED": "a b\nc", "PATH": "/opt/own/bin:/usr/bin:/bin"}
    kwargs = {"user": identity.user, "uid": identity.uid, "gid": identity.gid}
    log = HelperLog()
    bad_options = (
        ["--uid=0"], ["--gid=0"], ["--export=ALL"], ["--wrap=id"], ["--get-user-env"],
        ["--export-file=/etc/shadow"], ["--job-name=a\nb"], ["-A", "x"], ["--nodes"],
    )  # fmt: skip
    for bad in bad_options:
        with pytest.raises(privileged.HelperRefused, match="option"):
            privileged.sbatch(options=bad, script=script, environment={}, **kwargs)
    for who in (
        {"user": identity.user, "uid": identity.uid + 1, "gid": identity.gid},
        {"user": "root", "uid": 0, "gid": identity.gid},
        {"user": identity.user, "uid": identity.uid, "gid": 0},
    ):
        with pytest.raises(privileged.HelperRefused):
            privileged.sbatch(options=options, script=script, environment={}, **who)
    for env in ({"LD_PRELOAD=x": "y"}, {"1X": "y"}, {"X": "a\0b"}):
        with pytest.raises(privileged.HelperRefused, match="environment variable"):
            privileged.sbatch(options=options, script=script, environment=env, **kwargs)
    assert log.new().count("refused sbatch") == 15
    assert not os.listdir(out)
    # allowed: as the user, the project's group first, the variables from --export-file
    job_id = privileged.sbatch(options=options, script=script, environment=environment, **kwargs)
    assert job_id.strip().isdigit()
    deadline = time.monotonic() + 60
    while "|" not in ((out / "out.txt").read_text() if (out / "out.txt").exists() else ""):
        assert time.monotonic() < deadline, slurm("squeue", "-a", "-j", job_id.strip())
        time.sleep(0.5)
    uid, gid, groups, printed = (out / "out.txt").read_text().split("\n", 3)
    assert (int(uid), int(gid)) == (identity.uid, identity.gid)
    assert identity.tenant_gid in {int(g) for g in groups.split()}
    assert printed.startswith("a b\nc|/opt/own/bin:/usr/bin:/bin|")
    assert os.stat(out / "out.txt").st_uid == identity.uid
    assert grp.getgrgid(identity.gid).gr_name == identity.account


def test_local_accounts_only_with_names_and_numbers_of_the_ranges():
    """TORUS_IDENTITY_BACKEND=local: groupadd, useradd and gpasswd through the helper."""
    name, user = f"tp{uuid.uuid4().hex[:10]}", f"tu{uuid.uuid4().hex[:10]}"
    log = HelperLog()
    try:
        for call, reason in (
            (lambda: privileged.local_group_add(name=name, gid=100), "gid 100 is outside"),
            (lambda: privileged.local_group_add(name="Bad Name", gid=GID), "not a valid"),
            (lambda: privileged.local_user_add(name=user, uid=0, gid=GID, comment=""), "uid 0"),
            (lambda: privileged.local_members_set(name="sudo", members=[]), "outside the gid"),
            (lambda: privileged.local_members_set(name="root", members=["root"]), "outside"),
        ):
            refused(call, log, reason)
        with pytest.raises(KeyError):
            grp.getgrnam(name)
        assert "refused local-members from uid 0: group 'sudo'" in log.new()
        # allowed: a group and a user of the ranges, the user a member of the group
        privileged.local_group_add(name=name, gid=GID - 1)
        privileged.local_user_add(name=user, uid=UID - 1, gid=GID - 2, comment="Ada: L")
        with pytest.raises(privileged.HelperRefused, match="outside the uid range"):
            privileged.local_members_set(name=name, members=[user, "root"])
        privileged.local_members_set(name=name, members=[user])
        assert grp.getgrnam(name).gr_mem == [user]
        assert (pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gecos) == (UID - 1, "Ada  L")
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=False)
        for group in (user, name):
            subprocess.run(["groupdel", group], capture_output=True, check=False)
