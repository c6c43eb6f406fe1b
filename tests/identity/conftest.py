from tests.jobs.conftest import slurm_cluster  # noqa: F401  (fixture)
