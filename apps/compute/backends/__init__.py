"""Backends behind one interface (base.Backend): Slurm today; see for_cluster()."""

from apps.compute.backends.base import Backend
from apps.compute.models import Backend as BackendKind
from apps.compute.models import Cluster


def for_cluster(cluster: Cluster) -> Backend:
    if cluster.backend == BackendKind.SLURM:
        from apps.compute.backends.slurm import SlurmBackend

        return SlurmBackend(cluster)
    raise NotImplementedError(f"no backend for {cluster.backend!r} clusters yet")
