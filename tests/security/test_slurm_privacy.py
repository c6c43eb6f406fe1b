"""Slurm keeps tenants' jobs private (PrivateData): from a job and from a shell as a tenant's
user, Slurm's commands show nothing of another tenant's users, accounts, job names or jobs,
while the user's own job shows; the platform's account (a Slurm operator, not root) still sees
every tenant's jobs, through slurmrestd and sacct."""

import pwd
import re
import subprocess
import time
import uuid

import pytest
from django.conf import settings

from apps.compute.backends import for_cluster
from apps.identity.models import PosixAccount, PosixGroup
from apps.identity.services import group_name
from apps.jobs.models import Job
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, output, slurm, slurm_env, submit

SACCT = "sacct -a -X -P -n -S now-1days -o JobID,User,Account,JobName,Comment"
# Every command a job could use to look at other users' work; each section headed "== name".
PROBE = (
    f"SACCT='{SACCT}'\n"
    + r"""
section() { echo "== $1"; shift; "$@" 2>&1; echo; }
section squeue squeue -a -h -t all -o '%i|%u|%a|%j|%k'
section sacct $SACCT
section scontrol-other scontrol show job "$OTHER_ID"
section scontrol-all scontrol -o show job
section sshare sshare -a -P
section sprio sprio -h -o '%i|%u'
section sinfo sinfo -N --long
section sdiag sdiag
section sacctmgr-assoc sacctmgr -n -P show assoc format=account,user
section sacctmgr-user sacctmgr -n -P show user
section sacctmgr-account sacctmgr -n -P show account
section assoc_mgr scontrol show assoc_mgr flags=assoc
section sreport sreport -n -P cluster AccountUtilizationByUser start=now-1days
"""
)


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^== (\S+)$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _ids(section: str) -> set[str]:
    return {line.split("|")[0] for line in section.splitlines() if "|" in line}


def _shell_as(uid: int, *, script: str, env: dict[str, str]) -> str:
    """The probe in a login-like shell as `uid`, its groups from the directory."""
    gid = pwd.getpwuid(uid).pw_gid
    result = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups",
         "bash", "-c", script],
        env={**slurm_env(), **env}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def acme_jobs(acme, slurm_cluster):
    """A running acme job and a pending one (sprio lists pending jobs only), both named for
    acme; yields (running Slurm id, pending Slurm id, job name)."""
    name = f"acme-private-{uuid.uuid4().hex[:8]}"
    running = submit(acme.client(Role.MEMBER), acme.project, name=name, command=["sleep", "120"])
    job = drive(running["id"], until={"RUNNING"})
    account = PosixAccount.objects.get(user=acme.users[Role.MEMBER])
    group = PosixGroup.objects.get(project=acme.project)
    pending = slurm(
        "sbatch", "--parsable", f"--uid={account.uid}", f"--gid={group.gid}",
        f"--account={group.name}", f"--job-name={name}", "--begin=now+1hour", "-p", "gpu",
        "--chdir=/tmp", "--output=/dev/null", "--wrap=true",
    ).strip()  # fmt: skip
    try:
        yield job.attempts.get().backend_id, pending, name
    finally:
        slurm("scancel", pending, check=False)


def _acme_words(acme, name: str) -> list[str]:
    account = PosixAccount.objects.get(user=acme.users[Role.MEMBER])
    return [
        "acme",  # every acme user, account and job name holds it
        account.name,
        str(account.uid),
        group_name(tenant=acme.tenant),
        group_name(tenant=acme.tenant, project=acme.project),
        name,
    ]


def _assert_private(seen: str, *, acme_words: list[str], acme_ids: set[str], own: str, me: str):
    sections = _sections(seen)
    assert set(sections) >= {"squeue", "sacct", "scontrol-other", "sshare", "sprio", "sinfo"}
    # Slurm 22.05's sdiag lists the RPC counts of every user by name and uid whatever
    # PrivateData says (docs/security.md, Slurm privacy): never a job, a name or an account
    sdiag = sections.pop("sdiag")
    assert "by user" in sdiag and me in sdiag, sdiag
    for word in acme_words[-3:]:
        assert word not in sdiag, (word, sdiag)
    for name, text in sections.items():
        for word in acme_words:
            assert word not in text, (name, word, text)
    for name in ("squeue", "sacct", "scontrol-all"):
        assert not _ids(sections[name]) & acme_ids, (name, sections[name])
    # the control: the viewer's own job and name are there, in the same commands
    assert own in _ids(sections["squeue"]), sections["squeue"]
    assert f"JobId={own} " in sections["scontrol-all"], sections["scontrol-all"]
    assert me in sections["squeue"]
    # slurmdbd (sacct, sacctmgr, sreport) is closed to job uids by the firewall (its
    # PrivateData is tested below, from a uid outside the job range)
    for name in ("sacct", "sacctmgr-assoc", "sreport"):
        assert "Connection refused" in sections[name], (name, sections[name])


def test_a_tenants_job_and_shell_see_nothing_of_another_tenants_jobs(
    acme, globex, slurm_cluster, acme_jobs
):
    running_id, pending_id, name = acme_jobs
    acme_ids = {running_id, pending_id}
    words = _acme_words(acme, name)

    # from a job: globex's job runs the probe while it runs itself
    job = submit(
        globex.client(Role.MEMBER),
        globex.project,
        name="globex-probe",
        command=["bash", "-c", PROBE],
        env={"OTHER_ID": running_id},
    )
    job = drive(job["id"])
    assert job.state == "SUCCEEDED", job.state_reason
    seen = output(job)
    me = PosixAccount.objects.get(user=globex.users[Role.MEMBER])
    probe_id = job.attempts.get().backend_id
    _assert_private(seen, acme_words=words, acme_ids=acme_ids, own=probe_id, me=me.name)
    assert "Invalid job id" in _sections(seen)["scontrol-other"]

    # from a shell as globex's user, beside a job of its own that waits
    waiting = submit(globex.client(Role.MEMBER), globex.project, command=["sleep", "60"])
    own = drive(waiting["id"], until={"RUNNING"}).attempts.get().backend_id
    seen = _shell_as(me.uid, script=PROBE, env={"OTHER_ID": running_id})
    _assert_private(seen, acme_words=words, acme_ids=acme_ids, own=own, me=me.name)

    # the control of the same commands: the platform's account, a Slurm operator, sees both
    platform = _sections(_shell_as(_platform_uid(), script=PROBE, env={"OTHER_ID": running_id}))
    assert {running_id, pending_id, own} <= _ids(platform["squeue"])
    assert {running_id, probe_id} <= _ids(_platform_sacct({running_id, probe_id}))
    assert "p-acme" in platform["sacctmgr-assoc"] and "globex" in platform["sacctmgr-assoc"]
    assert f"JobName={name}" in platform["scontrol-other"]
    assert "acme" in platform["sshare"] and "globex" in platform["sshare"]


def test_slurmdbd_shows_a_user_who_is_not_an_operator_no_one_elses_jobs(
    acme, globex, slurm_cluster, acme_jobs
):
    """sacct and sacctmgr through slurmdbd, from a uid the firewall lets through (outside the
    job range, as a login node's user on a site without the owner-uid rule) that is not a
    Slurm operator: nothing of either tenant; the platform's account: both."""
    running_id, _pending, name = acme_jobs
    theirs = submit(globex.client(Role.MEMBER), globex.project, command=["sleep", "60"])
    theirs = drive(theirs["id"], until={"RUNNING"}).attempts.get().backend_id
    script = (
        "sacct -a -X -P -n -S now-1days -o JobID,User,Account,JobName 2>&1; echo ==;"
        " sacctmgr -n -P show assoc format=account,user 2>&1; echo ==;"
        " sacctmgr -n -P show user 2>&1; echo ==; sacctmgr -n -P show account 2>&1; true"
    )
    outsider = pwd.getpwnam("nobody").pw_uid
    low, high = settings.TORUS_UID_RANGE
    assert not low <= outsider <= high
    seen = _shell_as(outsider, script=script, env={})
    for word in ("acme", "globex", name, running_id, theirs):
        assert word not in seen, (word, seen)
    jobs = _platform_sacct({running_id, theirs})
    assert {running_id, theirs} <= _ids(jobs) and name in jobs
    platform = _shell_as(_platform_uid(), script=script, env={})
    assert "p-acme" in platform and "p-globex" in platform


def _platform_sacct(ids: set[str]) -> str:
    """sacct as the platform's account, until it lists `ids` (slurmdbd's records may lag)."""
    deadline = time.monotonic() + 30
    while True:
        found = _shell_as(_platform_uid(), script=SACCT, env={})
        if ids <= _ids(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _platform_uid() -> int:
    uid = pwd.getpwnam(settings.TORUS_SERVICE_USER).pw_uid
    assert uid != 0
    return uid


def test_the_platforms_reads_see_every_tenants_jobs_as_its_own_account(
    acme, globex, slurm_cluster, acme_jobs
):
    running_id, _pending, _name = acme_jobs
    theirs = submit(globex.client(Role.MEMBER), globex.project, command=["sleep", "60"])
    theirs = drive(theirs["id"], until={"RUNNING"}).attempts.get()
    backend = for_cluster(slurm_cluster)
    assert backend.user == settings.TORUS_SERVICE_USER != "root"
    # the reconciler's view (slurmrestd with the platform account's token)
    seen = {job.backend_id: job.tag for job in backend.jobs()}
    acme_attempt = Job.objects.get(tenant=acme.tenant).attempts.get()
    assert seen.get(running_id) == acme_attempt.tag
    assert seen.get(theirs.backend_id) == theirs.tag
    # accounting (sacct), as the platform's account
    found = _platform_sacct({running_id, theirs.backend_id})
    account = group_name(tenant=acme.tenant, project=acme.project)
    assert f"{running_id}|acme-member|{account}|" in found
    assert f"{theirs.backend_id}|globex-member|" in found
    # and the operator may act on any user's job through slurmrestd: nice back to 0, cancel
    backend.clear_nice(running_id)
    backend.cancel(running_id)
    deadline = time.monotonic() + 30
    while slurm("squeue", "-h", "-j", running_id, "-o", "%T", check=False).strip() == "RUNNING":
        assert time.monotonic() < deadline, "the operator's cancel did not end the job"
        time.sleep(0.5)
