"""Follow every Kubernetes cluster with watches (apps/compute/backends/kubernetes/watch.py);
scripts/portal starts one beside the workers. The reconciler reads what it writes."""

import signal
import threading

from django.core.management.base import BaseCommand

from apps.compute.models import Backend, Cluster


class Command(BaseCommand):
    help = "Watch the Jobs, pods, Kueue Workloads and nodes of every Kubernetes cluster."

    def add_arguments(self, parser):
        parser.add_argument(
            "--rescan", type=float, default=60, help="seconds between looks for new clusters"
        )

    def handle(self, *args, rescan, **options):
        from apps.compute.backends.kubernetes.backend import KubernetesBackend
        from apps.compute.backends.kubernetes.watch import ClusterWatch

        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        running: dict = {}
        while not stop.is_set():
            for cluster in Cluster.objects.filter(backend=Backend.KUBERNETES):
                key = (cluster.pk, repr(cluster.config))
                if key in running:
                    continue
                for old in [k for k in running if k[0] == cluster.pk]:
                    running.pop(old).stop()  # its settings changed
                settings = KubernetesBackend(cluster).settings
                running[key] = ClusterWatch(cluster_id=cluster.pk, settings=settings).start()
                self.stdout.write(f"watching cluster {cluster.name} ({settings.api_url})")
            stop.wait(rescan)
        for watch in running.values():
            watch.stop()
