"""A job's links never lead the platform out of the job's tree (issue 33 item 2): real Slurm
jobs plant a symbolic link as a PARENT of a path the platform reads — `x -> /` under
register_model's path, their attempt directory, log file and checkpoint directory swapped for
links into another tenant's job — and the platform reads nothing through them
(apps/identity/tree.py). Each refusal sits beside an allowed read of the same kind; the proof
of failure is the absence of the copied or shipped bytes."""

from pathlib import Path

import pytest

from apps.identity.storage import project_root
from apps.jobs import paths
from apps.jobs.outputs import model_register
from apps.logs.shipper import ship_pass
from apps.registry.models import ModelVersion
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, output, submit
from tests.logs.conftest import count


def run(world, script: str, **spec):
    job = submit(world.client(Role.MEMBER), world.project, command=["bash", "-c", script], **spec)
    return job["id"]


def stored_bytes(world) -> bytes:
    """Every byte of every model version file stored in the project's tree."""
    area = project_root(world.project) / "models"
    return b"".join(p.read_bytes() for p in area.rglob("*") if p.is_file() and not p.is_symlink())


def test_a_job_linking_root_registers_nothing_of_the_machine(acme, slurm_cluster):
    """The exploit: `ln -s / x` and register_model.path x/etc/ssh. The registration fails,
    naming the link, and copies nothing; the same job's real directory registers (control)."""
    script = 'ln -s / "$HOME/x" && mkdir "$HOME/model" && echo weights > "$HOME/model/w.bin"'
    loot = run(acme, script, register_model={"name": "loot", "path": "x/etc/ssh"})
    kept = run(acme, script, register_model={"name": "kept", "path": "model"})
    versions = {}
    for job_id in (loot, kept):
        job = drive(job_id)
        assert job.state == "SUCCEEDED", (job.state_reason, output(job))
        assert (paths.job_dir(job) / "x").is_symlink()
        versions[job_id] = model_register(attempt=job.attempts.get())
    stolen, control = versions[loot], versions[kept]
    assert stolen.state == "failed"
    assert f"{paths.job_dir(stolen.source_job)}/x is a symbolic link" in stolen.error
    assert not stolen.files.exists() and stolen.file_count == 0
    assert control.state == "ready", control.error
    assert [(f.path, f.size) for f in control.files.all()] == [("w.bin", 8)]
    stored = stored_bytes(acme)
    assert b"weights\n" in stored
    for secret in Path("/etc/ssh").glob("*"):
        if secret.is_file() and secret.stat().st_size > 32:
            assert secret.read_bytes() not in stored, secret
    assert ModelVersion.objects.filter(model__name="loot", state="ready").count() == 0


@pytest.mark.django_db(transaction=True)
def test_links_into_another_tenants_job_read_nothing_of_it(acme, globex, slurm_cluster, es):
    """globex's jobs swap their attempt directory, their log file and their checkpoint
    directory for links into acme's job. The shipper ships nothing of acme's log under globex,
    checkpoint discovery finds no checkpoint and the exit file reads as none; acme's own
    files, and globex's real ones, read as before (controls)."""
    victim = drive(
        run(acme, 'echo "acme secret line"; echo weights > "$TORUS_CHECKPOINT_DIR/step-1.pt"')
    )
    assert victim.state == "SUCCEEDED", victim.state_reason
    victim_attempt = victim.attempts.get()
    env = {
        "ACME_ATTEMPT": str(paths.attempt_dir(victim, 1)),
        "ACME_LOG": victim_attempt.stdout_path,
        "ACME_CKPT": victim.checkpoint_dir,
    }
    # one job: its whole attempt directory and its checkpoints become links
    swap_dirs = (
        'echo "globex line"; echo mine > "$TORUS_CHECKPOINT_DIR/own.pt"\n'
        'mv "$TORUS_CHECKPOINT_DIR" "$HOME/ck.real" && ln -s "$ACME_CKPT" "$TORUS_CHECKPOINT_DIR"\n'
        'mv "$HOME/attempt-1" "$HOME/attempt-1.real" && ln -s "$ACME_ATTEMPT" "$HOME/attempt-1"\n'
    )
    # another: only its stdout file becomes a link; its stderr stays real (control)
    swap_file = (
        'echo "globex stderr line" >&2\n'
        'out="$HOME/attempt-1/$(basename "$ACME_LOG")"\n'
        'rm "$out" && ln -s "$ACME_LOG" "$out"\n'
    )
    dirs = drive(run(globex, swap_dirs, env=env))
    files = drive(run(globex, swap_file, env=env))
    for job in (dirs, files):
        assert job.state in ("SUCCEEDED", "FAILED"), job.state_reason
    assert (paths.job_dir(dirs) / "attempt-1").is_symlink()
    assert Path(files.attempts.get().stdout_path).is_symlink()

    for _ in range(3):
        ship_pass()
    # the victim's own log ships (control); nothing of it under either globex attempt
    assert count(attempt=victim_attempt, query="acme secret line") == 1
    for job in (dirs, files):
        assert count(attempt=job.attempts.get(), query="acme secret line") == 0
    assert count(job=dirs) == 0  # its whole attempt directory is a link: nothing of it
    assert count(attempt=files.attempts.get(), query="globex stderr line") == 1

    # checkpoints: acme's is found (control); globex's directory, a link to acme's, has none
    assert paths.latest_checkpoint(victim.checkpoint_dir).endswith("/step-1.pt")
    assert paths.latest_checkpoint(dirs.checkpoint_dir) == ""
    assert paths.latest_checkpoint(str(paths.job_dir(dirs) / "ck.real")).endswith("/own.pt")
    # the exit file: acme's reads (control); globex's, through its linked attempt-1, does not
    assert paths.exit_status(victim, 1) == 0
    assert paths.exit_status(dirs, 1) is None
