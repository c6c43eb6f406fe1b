from tests.jobs.conftest import control_loop, slurm_cluster  # noqa: F401  (fixtures)
