"""Fixtures for the model registry: the project's storage area in the tenant tree, as the root
worker makes it (apps/identity/storage.py), removed afterwards."""

import shutil
from pathlib import Path

import pytest
from django.conf import settings

from apps.identity.storage import project_root


def _make_area(project) -> Path:
    root = Path(settings.TORUS_JOB_ROOT)
    area = project_root(project) / "models"
    area.mkdir(parents=True, exist_ok=True)
    for path in (root / project.tenant.slug, project_root(project), area):
        path.chmod(0o2750 if path == area else 0o2770)
    return area


@pytest.fixture
def models_area(acme):
    area = _make_area(acme.project)
    yield area
    shutil.rmtree(project_root(acme.project), ignore_errors=True)


@pytest.fixture
def globex_area(globex):
    area = _make_area(globex.project)
    yield area
    shutil.rmtree(project_root(globex.project), ignore_errors=True)


from tests.jobs.conftest import control_loop, slurm_cluster  # noqa: E402, F401  (fixtures)
from tests.logs.conftest import es, shipper_loop  # noqa: E402, F401  (fixtures)
