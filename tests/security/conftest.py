"""Fixtures for the isolation tests: the real Slurm cluster and Elasticsearch."""

from tests.jobs.conftest import control_loop, slurm_cluster  # noqa: F401  (fixtures)
from tests.logs.conftest import es  # noqa: F401  (fixture)
