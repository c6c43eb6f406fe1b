"""The browser UI against the real backend: the built UI (make ui) collected into the static
root, Debian's chromium driven by playwright-core (frontend/e2e/run.mjs, one Node process per
scenario), the whole ASGI app under uvicorn, real Slurm, Elasticsearch and the shipper."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.jobs.conftest import control_loop, slurm_cluster  # noqa: F401  (fixtures)
from tests.logs.conftest import es, shipper_loop  # noqa: F401  (fixtures)
from tests.registry.conftest import models_area  # noqa: F401  (fixtures)

FRONTEND = Path(settings.BASE_DIR) / "frontend"
# Screenshots of the main pages in both languages, for people to review (git ignores it).
SCREENSHOTS = FRONTEND / "e2e-output"
PASSWORD = "e2e-pass-8c1f"


@pytest.fixture(scope="session")
def built_ui(django_db_blocker):
    """The production build, collected as `make static` does (compressed, hashed)."""
    index = FRONTEND / "dist" / "index.html"
    assert index.is_file(), "the UI is not built: run `make ui`"
    with django_db_blocker.unblock():
        call_command("collectstatic", interactive=False, verbosity=0)
    return index


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError("chromium is missing: `make ui-test` installs Debian's chromium")


def node_path() -> list[str]:
    assert (FRONTEND / "node_modules" / "playwright-core").is_dir(), "run `make ui` (npm ci)"
    return [str(FRONTEND / "scripts" / "node.sh"), "node"]


def run_browser(scenario: str, params: dict, *, timeout: int = 300) -> dict:
    """Runs one scenario of frontend/e2e/run.mjs; returns what it reports (JSON on the last
    line of stdout). A failed step fails the test with the browser's console and errors."""
    SCREENSHOTS.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "TORUS_E2E_PARAMS": json.dumps(params),
        "CHROMIUM_PATH": chromium_path(),
        "TORUS_E2E_SCREENSHOTS": str(SCREENSHOTS),
    }
    result = subprocess.run(
        [*node_path(), str(FRONTEND / "e2e" / "run.mjs"), scenario],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    out, err = result.stdout[-4000:], result.stderr[-4000:]
    assert result.returncode == 0 and lines, f"{scenario} failed:\n{out}\n{err}"
    return json.loads(lines[-1])


def with_password(user):
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    return {"username": user.username, "password": PASSWORD}
