"""A model registered from a local directory (`torus models register NAME --path DIR`: its
files uploaded to a web server running as the platform account, as in production, then
committed and sealed) is readable by its project's jobs: a member's job on the real Slurm
cluster, as the member's uid, reads the version's files where a serve replica does."""

import hashlib
import os
import socket
import stat
import subprocess
import time

import httpx
import pytest

from apps.datasets.tasks import project_storage_ensure
from apps.identity.storage import project_root
from apps.jobs.inference import model_path
from apps.registry.models import ModelVersion
from apps.tenancy.models import Role
from tests.jobs.test_datasets_jobs import lines, run
from tests.sdk.cli import ROOT, run_cli
from tests.stack import portal_env

WEIGHTS = os.urandom(64 * 1024 + 3)


@pytest.fixture
def web_as_torus(live_server, tmp_path):
    """A web server on the test database run as the platform account `torus` (not root,
    whose chmod keeps what the account's drops); its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    argv = ["setpriv", "--reuid=torus", "--regid=torus", "--init-groups", "--"]
    argv += [ROOT / ".venv/bin/uvicorn", "config.asgi:application", "--fd", listener.fileno()]
    log = tmp_path / "web.log"
    with open(log, "wb") as out:
        web = subprocess.Popen(
            [str(a) for a in argv], cwd=ROOT, env=portal_env(TORUS_TLS="0"),
            stdout=out, stderr=subprocess.STDOUT, pass_fds=[listener.fileno()],
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert web.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield url
    finally:
        web.terminate()
        web.wait(timeout=30)
        listener.close()


def test_a_model_registered_from_a_path_is_read_by_a_members_job(
    web_as_torus, acme, slurm_cluster, tmp_path
):
    project_storage_ensure(str(acme.project.pk))  # what the root worker does on first need
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "tiny.gguf").write_bytes(WEIGHTS)
    env = {"TORUS_URL": web_as_torus, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}
    done = run_cli(
        "models", "register", "tiny", "--path", str(tmp_path / "tiny"),
        "--project", acme.project.slug, "--framework", "gguf", env=env,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("tiny:1 ready"), done.stderr
    version = ModelVersion.objects.get(model__name="tiny")

    # in the project's group (the models area's) and readable by it, as datasets; nobody else
    where = model_path(version) / "tiny.gguf"
    info = os.stat(where)
    area = os.stat(project_root(acme.project) / "models")
    assert info.st_gid == area.st_gid, (info.st_gid, area.st_gid)
    assert info.st_mode & stat.S_IRGRP and not info.st_mode & stat.S_IRWXO, oct(info.st_mode)

    job = run(acme, f'echo "SHA $(sha256sum < "{where}" | cut -d" " -f1)"')
    assert job.state == "SUCCEEDED", job.state_reason
    assert lines(job, "SHA") == [hashlib.sha256(WEIGHTS).hexdigest()]
