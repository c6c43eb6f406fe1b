"""bench/kubernetes_submit.py's log, the control plane's CPU and the platform's cluster."""

import os
import time
from pathlib import Path

from _common import cpu_parts as _cpu_parts
from _common import log as _log

NAME = "kubernetes_submit"


def log(msg: str) -> None:
    _log(NAME, msg)


CONTROL_PLANE = ("kube-apiserver", "kueue", "kube-controller", "kube-scheduler", "etcd", "kwok")


def split_cores(*, undo: bool = False) -> None:
    """As if the control plane ran on machines of its own: its processes (every thread) on
    the first CPU; PostgreSQL, Redis and this process (the web server and worker it starts
    inherit it) on the others. `undo`: every one of them on all CPUs again."""
    every = set(range(os.cpu_count() or 1))
    if len(every) < 2:
        raise SystemExit("--split-cores needs at least 2 CPUs")
    first, others = {0}, every - {0}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            if comm.startswith(CONTROL_PLANE):
                cpus = every if undo else first
            elif comm.startswith(("postgres", "redis-server")):
                cpus = every if undo else others
            else:
                continue
            for task in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(task), cpus)
        except OSError:  # gone meanwhile
            continue
    for task in os.listdir("/proc/self/task"):  # this process's threads
        os.sched_setaffinity(int(task), every if undo else others)
    log("cores shared again" if undo else f"control plane on CPU 0, the rest on {sorted(others)}")


def cpu_parts(roots: dict[str, int]) -> dict:
    """CPU seconds so far by part: the control plane's processes in all and each by name, each
    of `roots` with its descendants, PostgreSQL, Redis, the benchmark and the machine."""
    return _cpu_parts(
        roots,
        {
            "control_plane": CONTROL_PLANE,
            **{name: (name,) for name in CONTROL_PLANE},
            "postgres": ("postgres",),
            "redis": ("redis-server",),
        },
    )


def settle(timeout: float = 30.0) -> float:
    """Wait until the control plane is quiet (under a fifth of a core over half a second):
    the work a round sets going after its last Job exists (Kueue's Workloads, the Jobs'
    status, events) is done before the next round, whichever side it is, instead of landing
    in that round's time. The seconds waited."""
    started = time.monotonic()
    last = cpu_parts({})["control_plane"]
    while time.monotonic() - started < timeout:
        time.sleep(0.5)
        now = cpu_parts({})["control_plane"]
        if now - last < 0.1:
            break
        last = now
    return round(time.monotonic() - started, 1)


PLATFORM_CLUSTER = "bench-k8s-platform"
KUEUE_CQ = ("kueue.x-k8s.io", "v1beta2", "clusterqueues")
# Kueue admits one bench Job at a time and borrows nothing: the rest wait suspended (no pods),
# so the shared fake nodes stay free and neither side's pods load the apiserver.
BENCH_QUEUE = {
    "queue_cpu": "1",
    "kwok_delays": {"pod-create": "0s", "pod-ready": "0s", "pod-complete": "600s"},
}


def platform_cluster(*, cohort: str):
    """The platform phase's cluster: local-k8s's apiserver and settings with the bench's queue
    rule in a cohort of its own, registered (nodes read) as `cluster_register_local` does;
    removed again by the cleanup."""
    from apps.compute.models import Cluster
    from apps.compute.services import cluster_sync

    local = Cluster.objects.filter(name="local-k8s").first()
    if local is None:
        raise SystemExit("no cluster local-k8s: run `manage.py cluster_register_local` first")
    cluster, _ = Cluster.objects.update_or_create(
        name=PLATFORM_CLUSTER,
        defaults={
            "backend": local.backend,
            "is_default": False,
            "supports_containers": True,
            "config": {**local.config, **BENCH_QUEUE, "cohort": cohort},
        },
    )
    if not cluster_sync(cluster=cluster):
        cluster.refresh_from_db()
        raise SystemExit(f"cluster {cluster.name} did not answer: {cluster.last_error}")
    return cluster


def drop_platform_jobs(*, tenant_slug: str) -> int:
    """The platform phase's jobs and its cluster row, gone from the database before the
    namespace goes: else the reconciler would find their Jobs gone and run them again
    (self-healing), and the dev deployment would list and reconcile the bench's cluster. Every
    job of the phase's tenant is on that cluster (its project's default from the start)."""
    from apps.compute.models import Cluster
    from apps.jobs.models import Job

    dropped, _ = Job.objects.filter(tenant__slug=tenant_slug).delete()
    Cluster.objects.filter(name=PLATFORM_CLUSTER, jobs__isnull=True).delete()
    log(f"cleanup: {tenant_slug}'s jobs and cluster {PLATFORM_CLUSTER} removed ({dropped} rows)")
    return dropped
