"""Clusters, their partitions and nodes, and the kinds of accelerator they offer.

Clusters are platform infrastructure run by operators: every signed-in user may read them;
tenants' jobs are scoped, clusters are not.
"""

from django.db import models

from apps.core.models import BaseModel


class Backend(models.TextChoices):
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"


class AcceleratorType(BaseModel):
    """A kind of accelerator, as data: NVIDIA GPUs today, Ascend NPUs, DCUs or MLUs tomorrow.

    `gres_name` is the Slurm GRES name (`gpu`, `npu`, ...), `resource_name` the Kubernetes
    extended resource (`nvidia.com/gpu`), `visible_devices_env` the variable that lists a
    process's devices (CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES, ...).
    """

    name = models.CharField(max_length=50, unique=True)
    vendor = models.CharField(max_length=50, blank=True, default="")
    gres_name = models.CharField(max_length=50, unique=True)
    resource_name = models.CharField(max_length=100, blank=True, default="")
    visible_devices_env = models.CharField(max_length=64, blank=True, default="")
    # MiB of one device by type (Slurm's GRES type, e.g. {"h100": 81559, "a100-40gb": 40960});
    # "" for a device asked for without a type. The fit estimate (apps/compute/fit.py) reads it.
    memory_mb = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Cluster(BaseModel):
    name = models.SlugField(max_length=50, unique=True)
    backend = models.CharField(max_length=16, choices=Backend.choices, default=Backend.SLURM)
    # Backend connection settings, e.g. for Slurm: restd_url, api_version, slurm_conf,
    # jwt_user, jwt_lifespan; for Kubernetes: api_url, namespace, token_path.
    config = models.JSONField(default=dict, blank=True)
    is_default = models.BooleanField(default=False)
    supports_containers = models.BooleanField(default=False)
    healthy = models.BooleanField(default=True)
    last_error = models.TextField(blank=True, default="")
    last_synced_at = models.DateTimeField(null=True, blank=True)
    last_reconciled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Partition(BaseModel):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="partitions")
    name = models.CharField(max_length=64)
    is_default = models.BooleanField(default=False)
    state = models.CharField(max_length=32, blank=True, default="")
    max_time_minutes = models.PositiveIntegerField(null=True, blank=True)
    node_names = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="uniq_partition")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"


class Node(BaseModel):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=128)
    address = models.CharField(max_length=128, blank=True, default="")
    partitions = models.JSONField(default=list, blank=True)
    cpus = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveIntegerField(default=0)
    # {"<accelerator gres name>": {"<type or ''>": count}}, e.g. {"gpu": {"a100": 4}}
    accelerators = models.JSONField(default=dict, blank=True)
    accelerators_in_use = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=64, blank=True, default="")
    reason = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="uniq_node")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    def accelerator_count(self, gres_name: str, gres_type: str | None = None) -> int:
        kinds = self.accelerators.get(gres_name, {})
        if gres_type:
            return int(kinds.get(gres_type, 0))
        return sum(int(v) for v in kinds.values())
