"""bench/kubernetes_submit.py's backend phases: the watcher process and the Bench."""

import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from _common import django_setup, environment
from _kubernetes_submit_cluster import BENCH_QUEUE, KUEUE_CQ, NAME, drop_platform_jobs, log


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
