"""Backends behind one interface (base.Backend): Slurm and Kubernetes; see for_cluster()."""

from apps.compute.backends.base import Backend
from apps.compute.models import Backend as BackendKind
from apps.compute.models import Cluster


def backend_class(cluster: Cluster) -> type[Backend]:
    """The backend class of the cluster's kind: its capabilities (base.Backend) answer
    without connecting to the cluster."""
    return _class_of(cluster.backend)


def _class_of(kind: str) -> type[Backend]:
    if kind == BackendKind.SLURM:
        from apps.compute.backends.slurm import SlurmBackend

        return SlurmBackend
    if kind == BackendKind.KUBERNETES:
        from apps.compute.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend
    raise NotImplementedError(f"no backend for {kind!r} clusters")


def for_cluster(cluster: Cluster) -> Backend:
    return backend_class(cluster)(cluster)


def reserved_env_prefixes() -> tuple[str, ...]:
    """The environment prefixes any backend reserves (a spec is checked before its cluster
    is chosen)."""
    return tuple(p for kind in BackendKind.values for p in _class_of(kind).reserved_env_prefixes)


def reserved_label_domains() -> tuple[str, ...]:
    """The label prefixes (by their ending) any backend's own objects carry."""
    return tuple(d for kind in BackendKind.values for d in _class_of(kind).reserved_label_domains)
