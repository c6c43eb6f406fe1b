from tests.jobs.conftest import slurm_cluster  # noqa: F401  (the local Slurm cluster fixture)
