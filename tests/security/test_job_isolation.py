"""Tenants cannot reach each other on the cluster: real Slurm jobs of one tenant attack another
tenant's files and jobs and the platform itself, and every try is asserted to fail. Each
attack also makes one allowed try of the same kind, so a broken probe cannot pass for a
refusal."""

import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.urls import reverse

from apps.identity.models import PosixAccount, PosixGroup
from apps.identity.storage import project_root, tenant_root
from apps.jobs.models import Job
from apps.logs.models import LogCursor
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, output, slurm, submit
from tests.kubernetes.kube_helpers import wait_for as until

ROOT = Path(__file__).resolve().parents[2]
LDAP_COMPONENT = ROOT / "platform" / "services" / "components" / "ldap"

# try NAME CMD...: one line "TRY NAME ok|denied" (the command's output is not shown)
PROBE = """
try() {
  name=$1; shift
  if "$@" >/dev/null 2>&1; then echo "TRY $name ok"; else echo "TRY $name denied"; fi
}
connect() { exec 3<>"/dev/tcp/127.0.0.1/$1"; }
"""


def run_job(world, script: str, *, env: dict | None = None, until=None) -> Job:
    job = submit(
        world.client(Role.MEMBER),
        world.project,
        command=["bash", "-c", PROBE + script],
        env=env or {},
    )
    return drive(job["id"], until=until)


def tries(job: Job) -> dict[str, str]:
    return dict(line.split()[1:3] for line in output(job).splitlines() if line.startswith("TRY "))


def test_a_job_runs_as_its_submitter_with_the_projects_group_and_account(acme, slurm_cluster):
    job = run_job(
        acme,
        "id -u; id -G; touch $HOME/made-by-job; stat -c '%U %g %a' $HOME $HOME/made-by-job",
    )
    assert job.state == "SUCCEEDED", job.state_reason
    account = PosixAccount.objects.get(user=acme.users[Role.MEMBER])
    group = PosixGroup.objects.get(project=acme.project)
    tenant_group = PosixGroup.objects.get(tenant=acme.tenant, kind="tenant")
    uid, gids, home, made = output(job).splitlines()[:4]
    low, high = settings.TORUS_UID_RANGE
    assert int(uid) == account.uid and low <= account.uid <= high
    assert {str(group.gid), str(tenant_group.gid)} <= set(gids.split())
    # the job's directory and what it writes: its user's, in the project's group
    assert home == f"{account.name} {group.gid} 2750"
    assert made.split()[:2] == [account.name, str(group.gid)]
    attempt = job.attempts.get()
    log = os.stat(attempt.stdout_path)
    assert (log.st_uid, log.st_gid) == (account.uid, group.gid)
    # tenant and project directories: closed to everyone outside their groups
    assert os.stat(tenant_root(acme.tenant)).st_mode & 0o7777 == 0o2750
    assert os.stat(project_root(acme.project)).st_mode & 0o7777 == 0o3770
    # sticky: a member adds entries to the project directory but cannot swap the platform's
    # own (models/ renamed and replaced by a link would send registrations elsewhere)
    as_member = ["setpriv", f"--reuid={account.uid}", f"--regid={group.gid}", "--init-groups"]
    here = project_root(acme.project)
    mine = subprocess.run([*as_member, "mkdir", str(here / "mine")], capture_output=True)
    assert mine.returncode == 0, mine.stderr
    for name in ("models", "datasets", "jobs"):
        moved = subprocess.run(
            [*as_member, "mv", str(here / name), str(here / f"{name}.old")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert moved.returncode != 0 and "Operation not permitted" in moved.stderr, moved
        assert (here / name).is_dir() and not (here / name).is_symlink()
    # Slurm's own accounting sees the real user and the project's account (under the tenant's)
    seen = until(
        lambda: slurm(
            "sacct", "-X", "-n", "-P", "-j", attempt.backend_id, "-o", "User,Account"
        ).strip(),
        what="the job in sacct",
        timeout=30,
        interval=0.2,
    )
    assert seen == f"{account.name}|{group.name}"
    parents = slurm("sacctmgr", "-n", "-P", "show", "account", group.name, "withassoc",
                    "format=account,parentname")  # fmt: skip
    assert f"{group.name}|{tenant_group.name}" in parents.splitlines()


def test_another_tenants_files_and_the_platforms_secrets_are_out_of_reach(
    acme, globex, slurm_cluster
):
    victim = run_job(
        acme,
        'echo "acme secret line"; echo weights > "$TORUS_CHECKPOINT_DIR/step-1.pt"',
    )
    assert victim.state == "SUCCEEDED", victim.state_reason
    attempt = victim.attempts.get()
    checkpoint = Path(victim.checkpoint_dir) / "step-1.pt"
    var = Path(settings.VAR_DIR)
    secrets = {
        "secret-key": var / "secret-key",
        "services-env": var / "secrets" / "services.env",
        "ldap-password": var / "secrets" / "ldap-admin.pass",
        "slurm-jwt-key": var / "slurm" / "jwt.key",
        "munge-key": var / "slurm" / "munge.key",
        "postgres-data": var / "postgres" / "data" / "PG_VERSION",
        "slurmctld-log": var / "log" / "slurm-slurmctld.log",
        "slurm-state": var / "slurm" / "state" / "slurmctld" / "job_state",
    }
    for name, path in secrets.items():
        assert path.exists(), f"{name}: {path} should exist for this test to mean anything"
    env = {
        "ACME_TENANT": str(tenant_root(acme.tenant)),
        "ACME_JOB": str(Path(attempt.stdout_path).parents[1]),
        "ACME_LOG": attempt.stdout_path,
        "ACME_CKPT": str(checkpoint),
        "PLATFORM_VAR": str(var),
        **{f"SECRET_{i}": str(path) for i, path in enumerate(secrets.values())},
    }
    reads = "\n".join(f'try read-{name} cat "$SECRET_{i}"' for i, name in enumerate(secrets))
    ports = {
        "postgres": 15432,
        "redis": 16379,
        "elasticsearch": 19200,
        "slurmrestd": 16820,
        "slurmdbd": 16819,
        "mariadb": 16830,
        "ldap": 13389,
    }
    connects = "\n".join(f"try connect-{name} connect {port}" for name, port in ports.items())
    attacker = run_job(
        globex,
        f"""
try list-tenant ls "$ACME_TENANT"
try list-job ls "$ACME_JOB"
try read-log cat "$ACME_LOG"
try read-checkpoint cat "$ACME_CKPT"
try write-job touch "$ACME_JOB/evil"
try overwrite-checkpoint sh -c 'echo evil > "$ACME_CKPT"'
try list-platform ls "$PLATFORM_VAR"
{reads}
{connects}
try own-files sh -c 'echo mine > "$HOME/mine" && cat "$HOME/mine"'
try connect-slurmctld connect 16817
""",
        env=env,
    )
    assert attacker.state == "SUCCEEDED", attacker.state_reason
    result = tries(attacker)
    expected = {
        "list-tenant", "list-job", "read-log", "read-checkpoint", "write-job",
        "overwrite-checkpoint", "list-platform",
        *(f"read-{name}" for name in secrets), *(f"connect-{name}" for name in ports),
    }  # fmt: skip
    assert set(result) == expected | {"own-files", "connect-slurmctld"}, output(attacker)
    assert {name: result[name] for name in expected} == dict.fromkeys(expected, "denied")
    assert result["own-files"] == "ok" and result["connect-slurmctld"] == "ok"
    # the victim's files are as they were
    assert checkpoint.read_text() == "weights\n"
    assert "acme secret line" in Path(attempt.stdout_path).read_text()
    assert not (Path(attempt.stdout_path).parents[1] / "evil").exists()


def test_another_tenants_running_job_cannot_be_signalled_or_cancelled(acme, globex, slurm_cluster):
    victim = submit(acme.client(Role.MEMBER), acme.project, command=["sleep", "120"])
    running = drive(victim["id"], until={"RUNNING"})
    backend_id = running.attempts.get().backend_id
    acme_uid = PosixAccount.objects.get(user=acme.users[Role.MEMBER]).uid
    attacker = run_job(
        globex,
        """
pids=$(pgrep -u "$ACME_UID")
[ -n "$pids" ] && echo "TRY found-victim ok"
for p in $pids; do try kill-$p kill -9 "$p"; done
try scancel scancel "$ACME_SLURM_ID"
try requeue scontrol requeue "$ACME_SLURM_ID"
try own-signal sh -c 'sleep 30 & kill -9 $!'
""",
        env={"ACME_UID": str(acme_uid), "ACME_SLURM_ID": backend_id},
    )
    result = tries(attacker)
    assert result.pop("found-victim") == "ok", output(attacker)  # it saw the processes
    assert result.pop("own-signal") == "ok"
    assert result and set(result.values()) == {"denied"}, output(attacker)
    # squeue exits 0 with the line while the job is there; scancel as root ends the test
    assert slurm("squeue", "-h", "-j", backend_id, "-o", "%T").strip() == "RUNNING"
    assert Job.objects.get(pk=victim["id"]).state == "RUNNING"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"user": "root"}, "user"),
        ({"uid": 0}, "uid"),
        ({"group": "t-acme"}, "group"),
        ({"env": {"SLURM_JOB_UID": "0"}}, "env"),
        ({"env": {"TORUS_UID": "0"}}, "env"),
    ],
)
def test_a_spec_cannot_ask_for_another_identity(globex, extra, field):
    before = Job.objects.count()
    response = globex.client(Role.MEMBER).post(
        reverse("job-list"),
        {"project": str(globex.project.id), "name": "x", "command": ["id"], **extra},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert Job.objects.count() == before


def test_paths_outside_the_tenants_tree_are_refused_before_anything_is_made(
    acme, globex, slurm_cluster
):
    owner = run_job(acme, "echo ready")  # makes acme's tree
    assert owner.state == "SUCCEEDED"
    acme_project = project_root(acme.project)
    linker = run_job(globex, 'ln -s "$TARGET" "$HOME/escape"; try follow ls "$HOME/escape/"',
                     env={"TARGET": str(acme_project)})  # fmt: skip
    assert tries(linker) == {"follow": "denied"}  # the kernel refuses at run time too
    link = Path(linker.checkpoint_dir).parent / "escape"
    assert link.is_symlink()
    globex_tree = tenant_root(globex.tenant)
    cases = [
        ({"working_dir": str(acme_project)}, "working_dir", "tenant's tree"),
        ({"working_dir": "/etc"}, "working_dir", "tenant's tree"),
        ({"working_dir": f"{globex_tree}/../{acme.tenant.slug}"}, "working_dir", "'..'"),
        ({"working_dir": str(link)}, "working_dir", "symlink"),
        ({"working_dir": str(link / "jobs")}, "working_dir", "symlink"),
        ({"environment": {"type": "venv", "path": str(acme_project)}}, "environment", "tree"),
        ({"working_dir": "relative/dir"}, "working_dir", "absolute"),
    ]
    client = globex.client(Role.MEMBER)
    before = Job.objects.count()
    for extra, field, reason in cases:
        body = {"project": str(globex.project.id), "name": "x", "command": ["id"], **extra}
        response = client.post(reverse("job-list"), body, format="json")
        assert response.status_code == 400, (extra, response.content)
        assert reason in str(response.json()["error"]["fields"][field]), response.json()
    assert Job.objects.count() == before
    # the same fields inside the tenant's own tree are accepted
    allowed = {"working_dir": str(Path(linker.checkpoint_dir).parent)}
    body = {"project": str(globex.project.id), "name": "ok", "command": ["pwd"], **allowed}
    assert client.post(reverse("job-list"), body, format="json").status_code == 201


def _slapd_pid() -> int:
    return int((Path(settings.VAR_DIR) / "ldap" / "run" / "slapd.pid").read_text())


def test_the_directory_down_stops_new_identities_not_running_jobs(acme, globex, slurm_cluster):
    running = submit(acme.client(Role.MEMBER), acme.project,
                     command=["bash", "-c", "sleep 8; echo finished"])  # fmt: skip
    drive(running["id"], until={"RUNNING"})
    newcomer = globex.users[Role.MEMBER]
    os.kill(_slapd_pid(), signal.SIGTERM)
    try:
        waiting = submit(globex.client(Role.MEMBER), globex.project, command=["true"])
        job = drive(waiting["id"], until={"QUEUED"})
        for _ in range(3):
            job = drive(waiting["id"], until={"QUEUED"})
            time.sleep(0.5)
        # nothing half-written: no account, no backend job, still waiting
        assert job.state == "QUEUED" and not job.attempts.exclude(backend_id="").exists()
        assert not PosixAccount.objects.filter(user=newcomer).exists()
        finished = drive(running["id"])
        assert finished.state == "SUCCEEDED" and "finished" in output(finished)
    finally:
        subprocess.run([str(LDAP_COMPONENT), "start"], check=True, timeout=60)
    assert drive(waiting["id"]).state == "SUCCEEDED"
    assert PosixAccount.objects.filter(user=newcomer).exists()


@pytest.mark.django_db(transaction=True)
def test_the_shipper_reads_job_logs_as_the_platforms_own_unprivileged_account(
    acme, slurm_cluster, es
):
    job = run_job(acme, "for i in $(seq 1 50); do echo line $i; done")
    attempt = job.attempts.get()
    path = Path(attempt.stdout_path)
    assert path.stat().st_uid != 0
    # a uid of the job range with no grant on the tree cannot read it ...
    stranger = subprocess.run(
        ["setpriv", "--reuid=250000", "--regid=350000", "--clear-groups", "cat", str(path)],
        capture_output=True,
    )
    assert stranger.returncode != 0
    # ... the platform's account can, through the tree's ACL, and ships every line
    db = connection.settings_dict
    env = {
        **os.environ,
        "TORUS_DATABASE_URL": (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        ),
        "TORUS_JOB_ROOT": settings.TORUS_JOB_ROOT,  # logs are read only below the job root
    }
    platform_user = pwd.getpwnam(settings.TORUS_SERVICE_USER)
    assert platform_user.pw_uid != 0
    for _ in range(3):
        shipped = subprocess.run(
            ["runuser", "-u", settings.TORUS_SERVICE_USER, "--",
             sys.executable, "manage.py", "run_shipper", "--once"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert shipped.returncode == 0, shipped.stderr[-2000:]
        cursor = LogCursor.objects.filter(attempt=attempt, stream="stdout").first()
        if cursor and cursor.complete:
            break
    from tests.logs.conftest import count

    assert count(attempt=attempt) == 50
