"""Backends behind one interface (base.Backend): Slurm and Kubernetes; see for_cluster()."""

from apps.compute.backends.base import Backend
from apps.compute.models import Backend as BackendKind
from apps.compute.models import Cluster


def for_cluster(cluster: Cluster) -> Backend:
    if cluster.backend == BackendKind.SLURM:
        from apps.compute.backends.slurm import SlurmBackend

        return SlurmBackend(cluster)
    if cluster.backend == BackendKind.KUBERNETES:
        from apps.compute.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(cluster)
    raise NotImplementedError(f"no backend for {cluster.backend!r} clusters")
