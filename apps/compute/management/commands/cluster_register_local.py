"""Register (idempotently) the Slurm cluster that platform/services runs on this machine,
and read its partitions and nodes. Settings come from $TORUS_VAR_DIR/slurm/env."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.compute.envfile import read_env_file
from apps.compute.models import AcceleratorType, Backend, Cluster
from apps.compute.services import cluster_sync

NVIDIA = {
    "name": "nvidia-gpu",
    "vendor": "NVIDIA",
    "gres_name": "gpu",
    "resource_name": "nvidia.com/gpu",
    "visible_devices_env": "CUDA_VISIBLE_DEVICES",
}


class Command(BaseCommand):
    help = "Register the local Slurm cluster (platform/services/components/slurm) and sync it."

    def add_arguments(self, parser):
        parser.add_argument("--name", default="local")

    def handle(self, *args, **options):
        env_file = Path(settings.VAR_DIR) / "slurm" / "env"
        if not env_file.is_file():
            raise CommandError(f"{env_file} not found: run platform/services/up slurm first")
        env = read_env_file(env_file)
        AcceleratorType.objects.update_or_create(gres_name="gpu", defaults=NVIDIA)
        cluster, created = Cluster.objects.update_or_create(
            name=options["name"],
            defaults={
                "backend": Backend.SLURM,
                "is_default": True,
                "config": {
                    "restd_url": env["TORUS_SLURMRESTD_URL"],
                    "api_version": env.get("TORUS_SLURMRESTD_API", "v0.0.38"),
                    "jwt_key_path": env["TORUS_SLURM_JWT_KEY"],
                    "slurm_conf": env["SLURM_CONF"],
                    "user": "root",
                },
            },
        )
        if not cluster_sync(cluster=cluster):
            cluster.refresh_from_db()
            raise CommandError(f"cluster {cluster.name} did not answer: {cluster.last_error}")
        nodes = ", ".join(f"{n.name} ({n.state})" for n in cluster.nodes.all())
        verb = "registered" if created else "updated"
        self.stdout.write(f"cluster {cluster.name} {verb}: {nodes}")
