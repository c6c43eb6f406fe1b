"""The privileged helper as this checkout has it (helper/torus_helperd.py), run for one test on
a socket of its own, with the roots and ranges of the helper platform/services runs: a verb
added here is tested before the platform's helper is restarted with it."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings

HELPER = Path(settings.BASE_DIR) / "helper" / "torus_helperd.py"


@pytest.fixture
def own_helper(settings):
    config = json.loads((Path(settings.VAR_DIR) / "helper" / "config.json").read_text())
    work = Path(tempfile.mkdtemp(prefix="torus-helper-"))
    os.chmod(work, 0o755)  # the platform's account connects in tests that run as it
    config.update(socket=str(work / "helper.sock"), log=str(work / "helper.log"), pidfile="")
    (work / "config.json").write_text(json.dumps(config))
    process = subprocess.Popen([sys.executable, "-I", str(HELPER), str(work / "config.json")])
    deadline = time.monotonic() + 10
    while not (work / "helper.sock").exists():
        assert process.poll() is None and time.monotonic() < deadline, "the helper did not start"
        time.sleep(0.05)
    settings.TORUS_HELPER_SOCKET = str(work / "helper.sock")
    yield work / "helper.log"
    process.terminate()
    process.wait(timeout=10)
    shutil.rmtree(work, ignore_errors=True)
