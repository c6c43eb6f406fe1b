"""Register (idempotently) the clusters that platform/services runs on this machine, and read
their partitions and nodes: the Slurm cluster (settings from $TORUS_VAR_DIR/slurm/env, the
platform's default) and, when components/kubernetes has run, the Kubernetes one (TORUS_K8S_*
from the environment or secrets/services.env)."""

import ipaddress
import json
import subprocess
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.compute.envfile import read_env_file
from apps.compute.models import AcceleratorType, Backend, Cluster
from apps.compute.services import cluster_sync
from config.env import env_str

NVIDIA = {
    "name": "nvidia-gpu",
    "vendor": "NVIDIA",
    "gres_name": "gpu",
    "resource_name": "nvidia.com/gpu",
    "visible_devices_env": "CUDA_VISIBLE_DEVICES",
}
# MiB of one device by GRES type, as nvidia-smi reports it (the fit estimate reads them);
# filled in only where an operator has set none.
NVIDIA_MEMORY_MB = {
    "a100": 40960,
    "a100-40gb": 40960,
    "a100-80gb": 81920,
    "h100": 81559,
    "h200": 143771,
    "l4": 23034,
    "l40s": 46068,
    "t4": 15360,
    "v100": 32768,
}
# kwok runs no container, so nothing is pulled; the name only has to be valid
KUBERNETES_DEFAULT_IMAGE = "registry.invalid/torus/runtime:latest"


class Command(BaseCommand):
    help = (
        "Register the local Slurm cluster (platform/services/components/slurm) and, if it runs, "
        "the local Kubernetes cluster (components/kubernetes); sync both."
    )

    def add_arguments(self, parser):
        parser.add_argument("--name", default="local", help="the Slurm cluster's name")
        parser.add_argument("--k8s-name", default="local-k8s", help="the Kubernetes cluster's")
        parser.add_argument(
            "--backend",
            choices=["all", "slurm", "kubernetes"],
            default="all",
            help="register only this one (all: Slurm, and Kubernetes when it was brought up)",
        )

    def handle(self, *args, **options):
        nvidia, _ = AcceleratorType.objects.update_or_create(gres_name="gpu", defaults=NVIDIA)
        if not nvidia.memory_mb:
            nvidia.memory_mb = NVIDIA_MEMORY_MB
            nvidia.save(update_fields=["memory_mb", "updated_at"])
        if options["backend"] in ("all", "slurm"):
            self._register(self._slurm(options["name"]))
        if options["backend"] in ("all", "kubernetes"):
            api_url = env_str("TORUS_K8S_API_URL", "")
            if api_url:
                # beside Slurm (the default) it is optional: one that does not answer is
                # kept, marked unhealthy, and named on stderr
                required = options["backend"] == "kubernetes"
                self._register(self._kubernetes(options["k8s_name"], api_url), required=required)
            elif options["backend"] == "kubernetes":
                raise CommandError(
                    "TORUS_K8S_API_URL is not set: run platform/services/up kubernetes first"
                )

    def _slurm(self, name: str) -> tuple[Cluster, bool]:
        env_file = Path(settings.VAR_DIR) / "slurm" / "env"
        if not env_file.is_file():
            raise CommandError(f"{env_file} not found: run platform/services/up slurm first")
        env = read_env_file(env_file)
        return Cluster.objects.update_or_create(
            name=name,
            defaults={
                "backend": Backend.SLURM,
                "is_default": True,
                "config": {
                    "restd_url": env["TORUS_SLURMRESTD_URL"],
                    "api_version": env.get("TORUS_SLURMRESTD_API", "v0.0.38"),
                    "slurm_conf": env["SLURM_CONF"],
                    # reads as the platform's account, a Slurm operator; its tokens (and every
                    # user's) come from the privileged helper, which alone reads the JWT key
                    "user": settings.TORUS_SERVICE_USER,
                },
            },
        )

    def _kubernetes(self, name: str, api_url: str) -> tuple[Cluster, bool]:
        config = {
            "api_url": api_url,
            "ca_file": env_str("TORUS_K8S_CA_FILE", ""),
            "token_file": env_str("TORUS_K8S_TOKEN_FILE", ""),
            "namespace_per": "tenant",
            "storage_class": "",
            "kueue": True,
            "default_image": KUBERNETES_DEFAULT_IMAGE,
            # the platform's services run on this machine: its addresses are out of the
            # tenants' egress (docs/kubernetes.md, Egress)
            "egress_deny_cidrs": _machine_networks(),
        }
        visibility_url = env_str("TORUS_K8S_VISIBILITY_URL", "")
        if visibility_url:
            config["visibility_url"] = visibility_url
        return Cluster.objects.update_or_create(
            name=name,
            defaults={
                "backend": Backend.KUBERNETES,
                "is_default": False,
                "supports_containers": True,
                "config": config,
            },
        )

    def _register(self, registered: tuple[Cluster, bool], *, required: bool = True) -> None:
        cluster, created = registered
        if not cluster_sync(cluster=cluster):
            cluster.refresh_from_db()
            message = f"cluster {cluster.name} did not answer: {cluster.last_error}"
            if required:
                raise CommandError(message)
            self.stderr.write(f"{message} (registered, unhealthy)")
            return
        nodes = ", ".join(f"{n.name} ({n.state})" for n in cluster.nodes.all())
        verb = "registered" if created else "updated"
        self.stdout.write(f"cluster {cluster.name} {verb}: {nodes}")


def _machine_networks() -> list[str]:
    """Loopback and this machine's own global addresses (`ip -j addr`), as /32 and /128."""
    found = ["127.0.0.0/8", "::1/128"]
    try:
        shown = subprocess.run(
            ["/usr/bin/ip", "-j", "addr", "show"], capture_output=True, check=True, timeout=10
        )
        links = json.loads(shown.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return found
    for link in links:
        for address in link.get("addr_info") or []:
            if address.get("scope") == "global" and address.get("local"):
                found.append(str(ipaddress.ip_network(address["local"])))
    return found
