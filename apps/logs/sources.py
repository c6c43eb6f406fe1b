"""Where an attempt's output is read from: its cluster's log source (apps/compute/backends/
base.py LogSource: files on shared storage for Slurm, the pod log API for Kubernetes). The
shipper, the log API and so live tail, search and failure signatures read through here."""

import threading

from apps.compute.backends import for_cluster
from apps.compute.backends.base import FileLogSource, LogRef, LogSource

_files = FileLogSource()
_by_cluster: dict = {}
_lock = threading.Lock()


def log_ref(*, attempt, stream: str) -> LogRef:
    return LogRef(
        tag=attempt.tag,
        backend_id=attempt.backend_id,
        stream=stream,
        path=attempt.stdout_path if stream == "stdout" else attempt.stderr_path,
    )


def source_for(*, attempt) -> LogSource:
    """The log source of the attempt's cluster, made once per cluster and process (a job
    without a cluster, or one whose backend is not installed here, reads its files)."""
    job = attempt.job
    cluster_id = job.cluster_id
    if cluster_id is None:
        return _files
    with _lock:
        source = _by_cluster.get(cluster_id)
    if source is None:
        try:
            source = for_cluster(job.cluster).log_source()
        except (ImportError, NotImplementedError):
            source = _files
        with _lock:
            _by_cluster[cluster_id] = source
    return source
