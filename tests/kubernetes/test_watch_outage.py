"""A Kubernetes cluster whose watcher is silent (kube_watch not running, or stopped): the
reconciler marks it unhealthy with the reason and warns once per outage, not on every pass;
when the watcher reports again the cluster is healthy, and the next outage warns again."""

import logging
import uuid

from apps.compute.backends.kubernetes.backend import KubernetesBackend
from apps.compute.models import Cluster
from apps.jobs.reconcile import reconcile_cluster
from tests.kubernetes.kube_helpers import make_cluster, start_watch

SILENT = "last reported never (is kube_watch running?)"


def _said(caplog, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "apps.jobs.reconcile" and r.levelno == level
    ]


def test_a_silent_watch_warns_once_per_outage_and_the_cluster_says_why(
    db, kube_env, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG, logger="apps.jobs.reconcile")
    cluster = make_cluster(kube_env, job_root=str(tmp_path), name=f"k8s-{uuid.uuid4().hex[:8]}")
    backend = KubernetesBackend(cluster)
    backend.store.clear()
    try:
        for _ in range(3):  # three passes, no watcher
            reconcile_cluster(cluster_id=cluster.pk)
        cluster.refresh_from_db()
        assert not cluster.healthy and SILENT in cluster.last_error
        warned = _said(caplog, logging.WARNING)
        assert warned == [f"cluster {cluster.name} did not answer: {cluster.last_error}"]
        assert len([m for m in _said(caplog, logging.DEBUG) if SILENT in m]) == 2

        watch = start_watch(backend)  # the watcher reports: healthy again
        try:
            reconcile_cluster(cluster_id=cluster.pk)
        finally:
            watch.stop()
        cluster.refresh_from_db()
        assert cluster.healthy and cluster.last_error == ""
        assert f"cluster {cluster.name} answers again" in _said(caplog, logging.INFO)

        backend.store.clear()  # its heartbeat gone: a new outage, warned again
        caplog.clear()
        reconcile_cluster(cluster_id=cluster.pk)
        reconcile_cluster(cluster_id=cluster.pk)
        assert len(_said(caplog, logging.WARNING)) == 1
        assert not Cluster.objects.get(pk=cluster.pk).healthy
    finally:
        backend.store.clear()
