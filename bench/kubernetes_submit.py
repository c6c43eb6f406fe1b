"""Kubernetes backend benchmark, against the local control plane (platform/services
components/kubernetes: etcd, kube-apiserver, scheduler, controller manager, kwok, Kueue):

  submit      N attempts through the platform's submit path (KubernetesBackend.submit: the
              tenant's place from the cache, the manifests built and validated, the Job
              created), until every one has a Kubernetes Job; 1 and 8 threads
  peer        the same N Jobs (the same dicts, fresh names) created by direct calls of the
              official client (BatchV1Api.create_namespaced_job) against the same apiserver,
              1 and 8 threads; and (a floor, not an aim) one plain POST per Job through the
              client's ApiClient with no validation and no models
  watched     the time until the watcher (watch.py, in a process of its own as kube_watch
              runs) has a record of each of the N Jobs
  pass_calls  Kubernetes requests of one reconcile pass's backend calls (jobs, inventory,
              accounting) with 10 and with M jobs held (counted in KubeClient.request)
  platform    P jobs a round (600; 100 with --quick) through the whole platform, as
              bench/submit.py does for Slurm: one
              POST /api/v1/jobs/ each (8 client threads), and 50 specs a POST to
              /api/v1/jobs/batch/ (4 threads), uvicorn with 2 workers, into a
              project whose cluster (`bench-k8s-platform`: local-k8s's control plane and
              settings, with the bench's queue rule) it is, admission, and a Celery worker's
              dispatcher (identity, the project's tree, the Submission, KubernetesBackend.submit)
              until every attempt has its Kubernetes Job; beside the direct client's 8-thread
              rate on the same apiserver creating the round's very manifests again (fresh
              names, the same namespace and Kueue queue), each round on either side started
              on a quiet control plane (the issue's aim: at least 0.8x). Each round's CPU
              by part (the control plane's processes, web server, worker, PostgreSQL,
              Redis, this process, the machine), per job, from its start until the
              control plane is quiet again: the Workloads, status updates and events a Job
              sets going count for the side that made it. --split-cores runs the control
              plane on CPU 0 and everything else on the others, as on separate machines.
              Needs the portal's database migrated and `manage.py cluster_register_local`
              run (`make up` does both).

Each method runs three times per thread count, in rotated orders (the apiserver gets busier
as Jobs pile up), and its median round counts. The pass count comes first, with exactly 10
and then M jobs held. Kueue admits one bench Job at a time (its own cohort, one CPU of
quota): the others wait suspended, without pods, so other work on the shared fake nodes is
not disturbed.

Jobs ask for no GPU and one CPU, and kwok keeps their pods running (10 minutes), so nothing
ends during the measurement; the bench's namespaces are deleted at the end.

Run alone:  .venv/bin/python bench/kubernetes_submit.py [--quick] [--jobs N] [--held M]
            [--phases backend,platform] [--platform-jobs P] [--split-cores]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "kubernetes_submit", "metrics": {...}, "peers": {...}, "ratios": {...}}
Ratios are Torus's Jobs per second over the direct client's (the aim: at least 0.8).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "12")  # its cache DB (13) holds the watch records

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_parts as _cpu_parts
from _common import cpu_per_job, django_setup, ensure_tenant, environment, finish
from _common import log as _log

from scripts.devstack import start_web, stop_all

NAME = "kubernetes_submit"


def log(msg: str) -> None:
    _log(NAME, msg)


def watch_process(cluster_id: str, config: dict, stop) -> None:
    """The watcher in a process of its own, as `manage.py kube_watch` runs beside the
    dispatcher (so it does not take the submitting process's GIL)."""
    django_setup()
    from apps.compute.backends.kubernetes.settings import KubeSettings
    from apps.compute.backends.kubernetes.watch import ClusterWatch

    settings = KubeSettings.from_config(config)
    watch = ClusterWatch(cluster_id=cluster_id, settings=settings).start()
    stop.wait()
    watch.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 jobs per phase")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per submit phase (300)")
    parser.add_argument(
        "--platform-jobs", type=int, default=None, help="jobs per platform round (600)"
    )
    parser.add_argument("--held", type=int, default=500, help="jobs held for the pass count")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument(
        "--split-cores",
        action="store_true",
        help="the control plane on the first CPU, the platform and this bench on the others",
    )
    parser.add_argument(
        "--phases", default="backend,platform", help="backend (submit, peers, pass calls), platform"
    )
    args = parser.parse_args()
    n = args.jobs or (100 if args.quick else 300)
    phases = set(args.phases.split(","))
    django_setup()
    logdir = Path(tempfile.mkdtemp(prefix="bench-k8s-"))
    bench = Bench(n=n, held=args.held)
    if args.split_cores:
        split_cores()
    try:
        result = bench.run() if "backend" in phases else bench.empty()
        if "platform" in phases:
            platform_n = args.platform_jobs or (100 if args.quick else 600)
            platform_phase(bench, result, logdir=logdir, n=platform_n)
        result["metrics"]["split_cores"] = args.split_cores
    finally:
        bench.cleanup()
        stop_all()
        if args.split_cores:
            split_cores(undo=True)
    return finish(NAME, result, logdir=logdir, keep_logs=args.keep_logs)


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


def platform_bodies(*, cluster, backend, project, since) -> list[dict]:
    """The peer's Jobs: the very manifests the dispatcher made for a round's attempts (the same
    environment, labels, volume and queue, in the same namespace), under fresh names."""
    from dataclasses import replace

    from apps.compute.backends.kubernetes import manifests
    from apps.jobs import dispatch
    from apps.jobs.models import JobAttempt

    rows = JobAttempt.objects.filter(job__project=project, job__created_at__gte=since)
    rows = rows.select_related("job", "job__tenant", "job__project__tenant", "job__user")
    resources, identity, bodies = dispatch.accelerator_resources(), None, []
    settings, pools = backend.settings, backend.pools()
    for attempt in rows:
        identity = identity or dispatch.prepare_identity(
            job=attempt.job, cluster=cluster, backend=backend
        )
        submission = dispatch.build_submission(attempt, cluster, identity, resources=resources)
        submission = replace(submission, tag=f"torus:{uuid.uuid4()}")
        bodies.append(manifests.job(settings=settings, submission=submission, pools=pools)[1])
    return bodies


def platform_phase(bench: "Bench", result: dict, *, logdir: Path, n: int) -> None:
    """N jobs through the REST API, admission and the dispatcher (bench/submit.py's phase),
    into a project whose cluster is local-k8s's control plane; the peer is the direct client's
    8-thread rate creating the same round's manifests again (platform_bodies), each side's
    round started on a settled control plane."""
    from django.utils import timezone
    from submit import start_worker, torus_phase

    from apps.compute.backends import for_cluster

    ctx = ensure_tenant(
        slug=f"bk8s{uuid.uuid4().hex[:6]}",
        project_slug="submit",
        owner="bench-k8s",
        token_name="bench-k8s",
    )
    bench.platform_tenant = tenant = ctx["tenant"].slug
    cluster = platform_cluster(cohort=f"bench-{tenant}")
    ctx["project"].default_cluster = cluster
    ctx["project"].save(update_fields=["default_cluster"])
    ctx["cluster"] = cluster
    backend = for_cluster(cluster)
    web, port = start_web(logdir, workers=2, name="web")
    roots = {"web": web.popen.pid, "worker": start_worker(logdir).popen.pid}
    log(f"control plane settled after {settle(timeout=300)} s (an earlier run's namespaces go)")
    torus_phase(ctx, port, min(20, n), 8, "platform warm-up")  # identity, tree, namespace
    # One POST per job (8 client threads), and POST /api/v1/jobs/batch/ (50 specs a request,
    # 4 threads), each beside the direct client's 8-thread rate measured right after it.
    for mode, batch, threads in (("post", 0, 8), ("batch", 50, 4)):
        rates, direct, cpu = [], [], {"platform": [], "direct": []}
        for rnd in range(bench.rounds):
            settle()
            since = timezone.now()
            before = cpu_parts(roots)
            out = torus_phase(ctx, port, n, threads, f"platform {mode} round {rnd}", batch=batch)
            settle()  # the work its Jobs set going (Kueue's Workloads, status, events) counts
            cpu["platform"].append(cpu_per_job(before, cpu_parts(roots), n))
            if out["http_errors"] or out["rejected"]:
                raise RuntimeError(
                    f"platform {mode} round {rnd}: {out['http_errors']} errors, "
                    f"{out['rejected']} rejected"
                )
            rates.append(out["jobs_per_second"])
            bodies = platform_bodies(
                cluster=cluster, backend=backend, project=ctx["project"], since=since
            )
            before = cpu_parts(roots)
            direct.append(bench.direct_rate(threads=8, label="", bodies=bodies))
            settle()
            cpu["direct"].append(cpu_per_job(before, cpu_parts(roots), n))
            log(f"round {rnd}: platform {mode} {rates[-1]} jobs/s, direct {direct[-1]:.1f} jobs/s")
        platform, peer = statistics.median(rates), statistics.median(direct)
        result["metrics"][f"platform_{mode}_jobs_per_second"] = round(platform, 1)
        result["metrics"][f"platform_{mode}_rounds"] = rates
        result["peers"][f"direct_jobs_per_second_8t_beside_{mode}"] = round(peer, 1)
        result["peers"][f"direct_rounds_8t_beside_{mode}"] = [round(r, 1) for r in direct]
        result["ratios"][f"platform_{mode}"] = round(platform / peer, 2)
        # CPU per job from a round's start until the control plane is quiet after it, by
        # part; each side's median round (by the machine's CPU)
        for side, rows in cpu.items():
            result["metrics"][f"cpu_ms_per_job_{side}_{mode}"] = sorted(
                rows, key=lambda row: row["machine"]
            )[len(rows) // 2]


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


class Bench:
    def __init__(self, *, n: int, held: int):
        from kubernetes import client as k8s

        from apps.compute.backends.kubernetes.backend import KubernetesBackend
        from apps.compute.models import AcceleratorType, Backend, Cluster
        from config.env import env_str

        self.n, self.held = n, held
        self.tenant = f"bench{uuid.uuid4().hex[:6]}"
        self.rounds = 3
        AcceleratorType.objects.get_or_create(
            gres_name="gpu", defaults={"name": "nvidia-gpu", "resource_name": "nvidia.com/gpu"}
        )
        # An unsaved Cluster row: the backend reads its id, name and config only.
        self.cluster = Cluster(
            id=uuid.uuid4(),
            name="bench-k8s",
            backend=Backend.KUBERNETES,
            config={
                "api_url": env_str("TORUS_K8S_API_URL"),
                "ca_file": env_str("TORUS_K8S_CA_FILE"),
                "token_file": env_str("TORUS_K8S_TOKEN_FILE"),
                "kueue": True,
                "default_image": "registry.invalid/torus/runtime:latest",
                "job_root": "/srv/torus-bench",
                **BENCH_QUEUE,
                "cohort": f"bench-{self.tenant}",
            },
        )
        self.backend = KubernetesBackend(self.cluster)
        s = self.backend.settings
        conf = k8s.Configuration(host=s.api_url)
        conf.ssl_ca_cert = s.ca_file
        conf.api_key = {"authorization": Path(s.token_file).read_text().strip()}
        conf.api_key_prefix = {"authorization": "Bearer"}
        conf.connection_pool_maxsize = 16
        self.batch = k8s.BatchV1Api(k8s.ApiClient(conf))
        self.watcher = None
        self.stop = None
        self.platform_tenant = ""

    def submission(self, i: int, phase: str):
        from apps.compute.backends.base import Submission

        return Submission(
            tag=f"torus:{uuid.uuid4()}",
            name=f"bench-{phase}-{i}",
            environment={"TORUS_ARGV": "true", "TORUS_LAUNCHER": "none"},
            nodes=1,
            tasks_per_node=1,
            cpus_per_task=1,
            memory_mb_per_node=256,
            time_limit_minutes=30,
            working_dir=f"/srv/torus-bench/{self.tenant}/submit",
            user="bench",
            uid=20001,
            gid=30001,
            tenant=self.tenant,
            project="submit",
        )

    def empty(self) -> dict:
        return {"benchmark": NAME, "metrics": {}, "peers": {}, "ratios": {},
                "environment": environment()}  # fmt: skip

    def direct_rate(self, *, threads: int, label: str, bodies: list | None = None) -> float:
        """The official client creating N Jobs directly: `bodies` (Job manifests of one
        namespace), by default the backend's own for the bench's tenant and queue."""
        from apps.compute.backends.kubernetes import manifests

        if bodies is None:
            self.backend.ensure_place(tenant=self.tenant, project="submit")
            subs = [self.submission(i, label) for i in range(self.n)]
            bodies = [manifests.job(settings=self.backend.settings, submission=s)[1] for s in subs]
        ns = bodies[0]["metadata"]["namespace"]
        seconds = self.timed(lambda b: self.batch.create_namespaced_job(ns, b), bodies, threads)
        return len(bodies) / seconds

    def timed(self, fn, items, threads: int) -> float:
        start = time.perf_counter()
        if threads == 1:
            for item in items:
                fn(item)
        else:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(fn, items))
        return time.perf_counter() - start

    def run(self) -> dict:
        import multiprocessing

        from apps.compute.backends.base import ClusterUnavailable
        from apps.compute.backends.kubernetes import manifests
        from apps.compute.backends.kubernetes.backend import KubernetesBackend
        from apps.compute.backends.kubernetes.client import KubeClient

        b = self.backend
        b.ensure_place(tenant=self.tenant, project="submit")  # once, as after a first job
        spawn = multiprocessing.get_context("spawn")
        self.stop = spawn.Event()
        self.watcher = spawn.Process(
            target=watch_process,
            args=(str(self.cluster.pk), self.cluster.config, self.stop),
            daemon=True,
        )
        self.watcher.start()
        while True:  # the watcher has listed and beaten once
            try:
                b.jobs()
                break
            except ClusterUnavailable:  # until its first heartbeat
                time.sleep(0.2)
        kube = KubeClient(b.settings)
        metrics, peers = {"jobs_per_phase": self.n}, {}

        def phase(method: str, threads: int, rnd: int) -> None:
            subs = [self.submission(i, f"{method}{threads}r{rnd}") for i in range(self.n)]
            if method == "torus":
                backend = KubernetesBackend(self.cluster)  # a fresh one, as per dispatch pass
                seconds = self.timed(backend.submit, subs, threads)
            else:
                bodies = [manifests.job(settings=b.settings, submission=s)[1] for s in subs]
                ns = bodies[0]["metadata"]["namespace"]
                if method == "direct":
                    create = lambda body: self.batch.create_namespaced_job(ns, body)  # noqa: E731
                else:
                    create = kube.create
                seconds = self.timed(create, bodies, threads)
            rate = self.n / seconds
            log(f"round {rnd}: {self.n} Jobs, {method}, {threads} thread(s): {rate:.1f}/s")
            if method == "torus":
                start = time.perf_counter()
                tags = {s.tag for s in subs}
                while not tags <= {j.tag for j in b.jobs()}:
                    time.sleep(0.05)
                metrics[f"watched_all_after_submit_s_{threads}t_r{rnd}"] = round(
                    seconds + time.perf_counter() - start, 2
                )
            return rate

        for held in (10, self.held):  # first, so that these are all the jobs there are
            have = len(b.jobs())
            log(f"holding {held} Jobs for the pass count")
            subs = [self.submission(i, f"held{held}") for i in range(held - have)]
            self.timed(b.submit, subs, 8)
            while len(b.jobs()) < held:
                time.sleep(0.1)
            calls = KubeClient.calls
            start = time.perf_counter()
            b.jobs()
            b.inventory()
            b.accounting(tags={"torus:none"}, since=None)
            metrics[f"pass_ms_{held}_jobs"] = round((time.perf_counter() - start) * 1000, 1)
            metrics[f"pass_kube_requests_{held}_jobs"] = KubeClient.calls - calls
        orders = (
            ("torus", "direct", "raw"),
            ("direct", "raw", "torus"),
            ("raw", "torus", "direct"),
        )
        for threads in (1, 8):  # rounds in rotated orders (the apiserver gets busier as Jobs
            rates = {}  # pile up); each method's median round counts
            for rnd, order in enumerate(orders[: self.rounds]):
                for method in order:
                    rates.setdefault(method, []).append(phase(method, threads, rnd))
            median = {m: statistics.median(r) for m, r in rates.items()}
            metrics[f"torus_jobs_per_second_{threads}t"] = round(median["torus"], 1)
            metrics[f"torus_rounds_{threads}t"] = [round(r, 1) for r in rates["torus"]]
            peers[f"direct_jobs_per_second_{threads}t"] = round(median["direct"], 1)
            peers[f"direct_rounds_{threads}t"] = [round(r, 1) for r in rates["direct"]]
            peers[f"raw_post_jobs_per_second_{threads}t"] = round(median["raw"], 1)
            peers[f"raw_post_rounds_{threads}t"] = [round(r, 1) for r in rates["raw"]]
        ratios = {
            f"submit_{t}t": round(
                metrics[f"torus_jobs_per_second_{t}t"] / peers[f"direct_jobs_per_second_{t}t"], 2
            )
            for t in (1, 8)
        } | {
            f"submit_vs_raw_post_{t}t": round(
                metrics[f"torus_jobs_per_second_{t}t"] / peers[f"raw_post_jobs_per_second_{t}t"], 2
            )
            for t in (1, 8)
        }
        return {
            "benchmark": NAME,
            "metrics": metrics,
            "peers": peers,
            "ratios": ratios,
            "environment": environment(),
        }

    def cleanup(self) -> None:
        """The bench's namespace (its Jobs with it), queue and volume, with the admin's
        credentials (the platform's own may not delete namespaces)."""
        from kubernetes import client, config

        from config.env import env_str

        if self.watcher is not None:
            self.stop.set()
            self.watcher.join(timeout=60)
            self.backend.store.clear()
        api = config.new_client_from_config(config_file=env_str("TORUS_K8S_ADMIN_KUBECONFIG"))
        tenants = [self.tenant]
        if self.platform_tenant:
            drop_platform_jobs(tenant_slug=self.platform_tenant)
            tenants.append(self.platform_tenant)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for tenant in tenants:  # a namespace takes its Jobs and pods with it
            name = f"torus-{tenant}"
            for delete in (
                partial(core.delete_namespace, name, propagation_policy="Background"),
                partial(custom.delete_cluster_custom_object, *KUEUE_CQ, name),
                partial(core.delete_persistent_volume, f"{name}-submit"),
            ):
                try:
                    delete()
                except client.exceptions.ApiException as exc:
                    if exc.status != 404:  # 404: the phase that makes it did not run
                        log(f"cleanup: {exc.status} {exc.reason}: {exc.body}")
                except Exception as exc:  # best effort, logged
                    log(f"cleanup: {exc}")


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


if __name__ == "__main__":
    sys.exit(main())
