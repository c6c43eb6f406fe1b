"""Model deployments: a registered model version served online by replicas (long-lived jobs
of kind `serve`), the events of their life, per-deployment keys and per-request records."""

from django.conf import settings
from django.db import models

from apps.core.models import Archivable, TenantModel


class DeploymentState(models.TextChoices):
    PENDING = "PENDING"  # made, no replica asked for yet
    STARTING = "STARTING"  # replicas starting, none ready
    READY = "READY"  # at least the desired number ready
    DEGRADED = "DEGRADED"  # some ready, fewer than desired
    IDLE = "IDLE"  # scaled to zero; the next request wakes it
    UPDATING = "UPDATING"  # a rolling update to another version
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class KvCacheType(models.TextChoices):
    F16 = "f16"
    Q8_0 = "q8_0"


class Runtime(models.TextChoices):
    LLAMA_CPP = "llama.cpp"


class Deployment(Archivable, TenantModel):
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(
        "tenancy.Project", on_delete=models.CASCADE, related_name="deployments"
    )
    name = models.SlugField(max_length=63)
    model = models.ForeignKey(
        "registry.RegisteredModel", on_delete=models.PROTECT, related_name="deployments"
    )
    ref = models.CharField(max_length=140)  # as given: "name:3" or "name@production"
    follow_alias = models.CharField(max_length=40, blank=True, default="")
    version = models.ForeignKey(
        "registry.ModelVersion", on_delete=models.PROTECT, related_name="deployments"
    )
    runtime = models.CharField(max_length=16, choices=Runtime.choices, default=Runtime.LLAMA_CPP)

    replicas_min = models.PositiveIntegerField(default=1)
    replicas_max = models.PositiveIntegerField(default=1)
    replicas_desired = models.PositiveIntegerField(default=1)
    # per replica
    cpus = models.PositiveIntegerField(default=1)
    memory_mb = models.PositiveIntegerField(default=1024)
    gpus = models.PositiveIntegerField(default=0)
    gpu_type = models.CharField(max_length=64, blank=True, default="")
    accelerator = models.CharField(max_length=64, default="gpu")
    partition = models.CharField(max_length=64, blank=True, default="")
    cluster = models.ForeignKey(
        "compute.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # the engine
    slots = models.PositiveIntegerField(default=4)  # parallel sequences (-np)
    context = models.PositiveIntegerField(default=2048)  # tokens per slot
    kv_cache_type = models.CharField(max_length=8, choices=KvCacheType.choices, default="f16")
    # scaling policy
    scale_to_zero_after_s = models.PositiveIntegerField(null=True, blank=True)  # null: never
    autoscale_target = models.FloatField(default=1.0)  # queued+processing per slot
    # limits the gateway applies
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)  # per caller
    max_request_bytes = models.PositiveIntegerField(default=1024 * 1024)
    max_tokens = models.PositiveIntegerField(default=512)

    state = models.CharField(
        max_length=12, choices=DeploymentState.choices, default=DeploymentState.PENDING
    )
    state_reason = models.TextField(blank=True, default="")
    last_request_at = models.DateTimeField(null=True, blank=True)
    woken_at = models.DateTimeField(null=True, blank=True)  # a wake waiting for its first READY
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="uniq_deployment_name")
        ]
        indexes = [models.Index(fields=["state"])]

    def __str__(self) -> str:
        return self.name


class ReplicaState(models.TextChoices):
    STARTING = "STARTING"
    READY = "READY"
    UNHEALTHY = "UNHEALTHY"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"


REPLICA_LIVE = (ReplicaState.STARTING, ReplicaState.READY)


class Replica(TenantModel):
    tenant_path = "deployment__tenant"

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="replicas")
    job = models.OneToOneField(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="replica"
    )
    version = models.ForeignKey(
        "registry.ModelVersion", on_delete=models.PROTECT, related_name="replicas"
    )
    state = models.CharField(
        max_length=12, choices=ReplicaState.choices, default=ReplicaState.STARTING
    )
    state_reason = models.TextField(blank=True, default="")
    host = models.CharField(max_length=255, blank=True, default="")
    port = models.PositiveIntegerField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["deployment", "created_at"]
        indexes = [models.Index(fields=["deployment", "state"])]

    def __str__(self) -> str:
        return f"{self.deployment.name}/{self.pk}"


class EventKind(models.TextChoices):
    CREATED = "created"
    SCALED_UP = "scaled_up"
    SCALED_DOWN = "scaled_down"
    REPLICA_STARTED = "replica_started"
    REPLICA_READY = "replica_ready"
    REPLICA_UNHEALTHY = "replica_unhealthy"
    REPLICA_REPLACED = "replica_replaced"
    REPLICA_STOPPED = "replica_stopped"
    ROLLOUT_STARTED = "rollout_started"
    ROLLOUT_DONE = "rollout_done"
    SCALED_TO_ZERO = "scaled_to_zero"
    WOKEN = "woken"
    UPDATED = "updated"
    STOPPED = "stopped"
    FAILED = "failed"
    FAILING = "failing"  # it was serving and fewer replicas are ready than asked for; once
    RECOVERED = "recovered"  # READY again after failing or FAILED


class DeploymentEvent(TenantModel):
    tenant_path = "deployment__tenant"

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=24, choices=EventKind.choices)
    message = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["deployment", "created_at"])]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.kind}"


class DeploymentKey(TenantModel):
    """A bearer key for one deployment's gateway path: `tsk_...`, shown once; only its
    sha256 is kept."""

    tenant_path = "deployment__tenant"

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=64)
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["deployment", "created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"


class ServingRequest(TenantModel):
    """One request through the gateway (written in batches by apps/serving/records.py)."""

    tenant_path = "deployment__tenant"

    deployment = models.ForeignKey(
        Deployment, on_delete=models.CASCADE, related_name="serving_requests"
    )
    replica = models.ForeignKey(
        Replica, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    key = models.ForeignKey(
        DeploymentKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    path = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    error = models.CharField(max_length=255, blank=True, default="")
    stream = models.BooleanField(default=False)
    retried = models.BooleanField(default=False)
    latency_ms = models.FloatField(default=0)
    ttft_ms = models.FloatField(null=True, blank=True)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["deployment", "created_at"])]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.path} {self.status}"
