"""The soak's fixtures: Elasticsearch (logs) and the registered Slurm cluster (jobs)."""

from tests.jobs.conftest import slurm_cluster  # noqa: F401  (fixtures)
from tests.logs.conftest import es  # noqa: F401
