"""No root program runs with a tenant's input when the platform submits to Slurm (issue 33).

A globex job plants programs (`bin/sbatch` and the other Slurm commands), a preload library, a
BASH_ENV file and a Python startup file in its own directory; later jobs name them in `env`
(PATH, LD_PRELOAD, LD_LIBRARY_PATH, BASH_ENV, ENV, PYTHONSTARTUP) and are submitted every way
the platform submits: through slurmrestd, through the sbatch fallback with slurmrestd
stopped, and as an attempt that avoids a node (which always goes through sbatch). Each planted
thing appends "<uid> <what>" to a marker file when it runs. Proof of failure: no line from a
platform process (uid 0, the platform's account, or a Slurm command) ever appears; the
control: the same variables reached the job itself, as its user (its lines, its PATH).
"""

import dataclasses
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from apps.compute.backends import for_cluster
from apps.identity.models import PosixAccount, PosixGroup
from apps.jobs import dispatch
from apps.jobs.models import Job, JobAttempt
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, output, slurm, submit
from tests.kubernetes.kube_helpers import wait_for as until

ROOT = Path(__file__).resolve().parents[2]
SLURM_COMPONENT = ROOT / "platform" / "services" / "components" / "slurm"
SLURM_COMMANDS = ("sbatch", "srun", "squeue", "sacct", "sacctmgr", "scontrol", "scancel", "munge")

# Run by the planting job as its user, in its own directory: $MARK is the marker file.
PLANT = r"""
set -eu
dir="$HOME/planted"
mkdir -p "$dir/bin" "$dir/lib"
for cmd in $COMMANDS; do
  printf '#!/bin/sh\necho "$(/usr/bin/id -u) planted-%s" >> %s\nexec /usr/bin/%s "$@"\n' \
    "$cmd" "$MARK" "$cmd" > "$dir/bin/$cmd"
  chmod 755 "$dir/bin/$cmd"
done
cat > "$dir/plant.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    char comm[64] = "?";
    FILE *c = fopen("/proc/self/comm", "r");
    if (c) { if (fgets(comm, sizeof comm, c)) comm[strcspn(comm, "\n")] = 0; fclose(c); }
    FILE *f = fopen(MARK, "a");
    if (f) { fprintf(f, "%d preload %s\n", (int)getuid(), comm); fclose(f); }
}
C
TMPDIR="$dir" /usr/bin/gcc -shared -fPIC -DMARK="\"$MARK\"" -o "$dir/lib/libplant.so" "$dir/plant.c"
cp "$dir/lib/libplant.so" "$dir/lib/libmunge.so.2"
printf 'echo "$(/usr/bin/id -u) bash_env $0" >> %s\n' "$MARK" > "$dir/bash_env"
printf 'import os\nopen("%s", "a").write("%%d pythonstartup\\n" %% os.getuid())\n' "$MARK" \
  > "$dir/startup.py"
echo "PLANTED $dir"
"""

# The attacking jobs' own command: what they see of their variables.
SHOW = 'echo "JOBPATH=$PATH"; echo "JOBPRELOAD=${LD_PRELOAD:-}"; compgen -e | sed "s/^/JOBVAR=/"'


@pytest.fixture
def marker():
    """A file any uid may append to; whoever runs a planted thing leaves its uid there."""
    folder = Path("/tmp") / f"torus-planted-{uuid.uuid4().hex}"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    try:
        yield folder / "hits"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def planted(globex, slurm_cluster, marker) -> Path:
    job = submit(
        globex.client(Role.MEMBER),
        globex.project,
        command=["bash", "-c", PLANT],
        env={"MARK": str(marker), "COMMANDS": " ".join(SLURM_COMMANDS)},
    )
    job = drive(job["id"])
    assert job.state == "SUCCEEDED", output(job)
    folder = Path(output(job).split("PLANTED ", 1)[1].split()[0])
    assert (folder / "bin" / "sbatch").is_file() and (folder / "lib" / "libplant.so").is_file()
    marker.unlink(missing_ok=True)  # the planting job's own gcc loaded nothing planted
    return folder


def _attack_env(folder: Path) -> dict[str, str]:
    return {
        "PATH": f"{folder}/bin:/usr/bin:/bin",
        "LD_PRELOAD": f"{folder}/lib/libplant.so",
        "LD_LIBRARY_PATH": f"{folder}/lib",
        "BASH_ENV": f"{folder}/bash_env",
        "ENV": f"{folder}/bash_env",
        "PYTHONSTARTUP": f"{folder}/startup.py",
    }


def _pid_of(name: str) -> int | None:
    for run in {Path(settings.VAR_DIR) / "run", Path(os.environ.get("TORUS_RUN_DIR", "/-"))}:
        try:
            pid = int((run / name).read_text())
            if b"slurmrestd" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except (OSError, ValueError):
            continue
    return None


def _restd_answers() -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", 16820)) == 0


def _stop_slurmrestd() -> None:
    """slurmrestd and the keeper that restarts it, stopped (the component starts them)."""
    for name in ("slurm-restd-keeper.pid", "slurm-slurmrestd.pid"):
        pid = _pid_of(name)
        if pid:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _restd_answers():
        assert time.monotonic() < deadline, "slurmrestd did not stop"
        time.sleep(0.2)


def _hits(marker: Path) -> list[tuple[int, str]]:
    if not marker.exists():
        return []
    lines = [line.split(maxsplit=1) for line in marker.read_text().splitlines() if line]
    return [(int(uid), what) for uid, what in lines]


def _assert_no_platform_process_ran_it(marker: Path, job: Job, folder: Path, *, user_uid: int):
    platform = pwd.getpwnam(settings.TORUS_SERVICE_USER).pw_uid
    hits = _hits(marker)
    # nothing planted ran as root or as the platform, and no Slurm command ran anything planted
    assert not [h for h in hits if h[0] in (0, platform)], hits
    assert not [h for h in hits if h[1].startswith("planted-")], hits
    assert not [h for h in hits if h[1].split()[-1] in SLURM_COMMANDS], hits
    assert job.state == "SUCCEEDED", (job.state_reason, output(job))
    seen = output(job)
    # the control: the job itself ran as its user with the variables it asked for
    assert {uid for uid, _ in hits} == {user_uid}, hits
    assert any(what.startswith("preload ") for _, what in hits), hits
    assert any(what.startswith("bash_env ") for _, what in hits), hits
    assert f"JOBPATH={folder}/bin:/usr/bin:/bin\n" in seen, seen
    assert f"JOBPRELOAD={folder}/lib/libplant.so\n" in seen, seen
    # nothing of the platform's own environment reached the job
    names = {line[7:] for line in seen.splitlines() if line.startswith("JOBVAR=")}
    assert "TORUS_JOB_ID" in names and "PYTHONSTARTUP" in names
    leaked = names & {"DJANGO_SETTINGS_MODULE", "TORUS_SECRET_KEY", "VIRTUAL_ENV", "SBATCH_EXPORT"}
    assert not leaked, leaked


def _attack(globex, folder: Path, *, excluded: list[str] | None = None) -> str:
    job = submit(globex.client(Role.MEMBER), globex.project, command=["bash", "-c", SHOW],
                 env=_attack_env(folder))  # fmt: skip
    if excluded:  # a restart that avoids a failed node: always through sbatch
        Job.objects.get(pk=job["id"]).attempts.update(excluded_nodes=excluded)
    return job["id"]


def _user_uid(world) -> int:
    return PosixAccount.objects.get(user=world.users[Role.MEMBER]).uid


def test_through_slurmrestd(globex, slurm_cluster, planted, marker):
    job = drive(_attack(globex, planted))
    _assert_no_platform_process_ran_it(marker, job, planted, user_uid=_user_uid(globex))


def test_through_the_sbatch_fallback_with_slurmrestd_stopped(
    globex, slurm_cluster, planted, marker
):
    job_id = _attack(globex, planted)
    _stop_slurmrestd()
    try:
        job = drive(job_id, condition=lambda j: j.attempts.exclude(backend_id="").exists())
        assert not _restd_answers()  # it went through sbatch
    finally:
        subprocess.run([str(SLURM_COMPONENT), "start"], check=True, timeout=120)
    job = drive(job_id)
    _assert_no_platform_process_ran_it(marker, job, planted, user_uid=_user_uid(globex))


def test_a_restart_that_avoids_a_node(globex, slurm_cluster, planted, marker):
    job = drive(_attack(globex, planted, excluded=["n3"]))
    assert "n3" not in job.attempts.get().nodes
    _assert_no_platform_process_ran_it(marker, job, planted, user_uid=_user_uid(globex))


def test_the_sbatch_fallback_runs_the_job_as_its_user_in_the_projects_group(acme, slurm_cluster):
    """The helper runs sbatch as the submitter: the job's primary group is the project's, as
    `sbatch --gid` made it, and Slurm records the submitter and the project's account."""
    job = submit(acme.client(Role.MEMBER), acme.project, command=["bash", "-c", "id -u; id -g"])
    Job.objects.get(pk=job["id"]).attempts.update(excluded_nodes=["n3"])
    job = drive(job["id"])
    assert job.state == "SUCCEEDED", output(job)
    account = PosixAccount.objects.get(user=acme.users[Role.MEMBER])
    group = PosixGroup.objects.get(project=acme.project)
    uid, gid = output(job).split()[:2]
    assert (int(uid), int(gid)) == (account.uid, group.gid)
    backend_id = job.attempts.get().backend_id
    expected = f"{account.name}|{group.name}|{group.name}"
    # slurmdbd's record may lag the job's end
    until(
        lambda: (
            slurm("sacct", "-X", "-n", "-P", "-j", backend_id, "-o", "User,Group,Account").strip()
            == expected
        ),
        what=f"sacct to say {expected}",
        timeout=30,
        interval=0.2,
    )


def test_secrets_reach_the_job_on_both_paths_and_never_its_environment_field(acme, slurm_cluster):
    backend = for_cluster(slurm_cluster)
    value = f"s3cr3t-{uuid.uuid4().hex}"
    for through_sbatch in (False, True):
        client = acme.client(Role.ADMIN)
        job_id = submit(client, acme.project, command=["bash", "-c", 'echo "T=$MY_TOKEN"'])["id"]
        (attempt_id,) = dispatch.claim(cluster=slurm_cluster, limit=10)
        attempt = JobAttempt.objects.select_related("job__tenant", "job__project__tenant").get(
            pk=attempt_id
        )
        identity = dispatch.prepare_identity(job=attempt.job, cluster=slurm_cluster,
                                             backend=backend)  # fmt: skip
        dispatch.prepare(attempt, cluster=slurm_cluster, identity=identity)
        submission = dispatch.build_submission(attempt, slurm_cluster, identity)
        submission = dataclasses.replace(submission, secrets={"MY_TOKEN": value})
        assert value not in str(submission.environment)
        if through_sbatch:
            backend_id = backend.submit_with_sbatch(submission)
        else:
            backend_id = backend.submit(submission)
        deadline = time.monotonic() + 60
        while slurm("squeue", "-h", "-j", backend_id, "-o", "%T", check=False).strip():
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert Path(attempt.stdout_path).read_text().strip() == f"T={value}", job_id


def test_slurms_own_option_variables_are_refused_in_env(globex, slurm_cluster):
    client = globex.client(Role.MEMBER)
    before = Job.objects.count()
    for name in ("SBATCH_EXPORT", "SBATCH_UID", "SRUN_EXPORT_ENV", "SALLOC_ACCOUNT", "SLURM_CONF"):
        body = {"project": str(globex.project.id), "name": "x", "command": ["id"],
                "env": {name: "ALL"}}  # fmt: skip
        response = client.post(reverse("job-list"), body, format="json")
        assert response.status_code == 400, response.content
        assert name in response.json()["error"]["fields"]["env"], response.json()
    assert Job.objects.count() == before
    # the control: the same names not at the start, and the job's own PATH, are accepted
    body = {"project": str(globex.project.id), "name": "x", "command": ["id"],
            "env": {"MY_SBATCH_EXPORT": "ALL", "PATH": "/opt/x/bin:/usr/bin"}}  # fmt: skip
    response = client.post(reverse("job-list"), body, format="json")
    assert response.status_code == 201, response.content
