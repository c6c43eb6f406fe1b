"""Jobs, their attempts on a backend, and the timeline of their state changes."""

from django.conf import settings
from django.db import models

from apps.core.models import TenantModel
from apps.jobs.states import State


class Kind(models.TextChoices):
    TRAINING = "training"
    INFERENCE = "inference"
    SERVE = "serve"  # a deployment's replica (apps/serving)


class Job(TenantModel):
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="jobs")
    project = models.ForeignKey("tenancy.Project", on_delete=models.CASCADE, related_name="jobs")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TRAINING)
    spec = models.JSONField()  # the validated, normalised spec (apps/jobs/spec.py)
    labels = models.JSONField(default=dict, blank=True)
    priority = models.IntegerField(default=0, db_index=True)

    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    state_reason = models.TextField(blank=True, default="")
    queue_position = models.PositiveIntegerField(null=True, blank=True)

    # What admission reserves: totals over all nodes of the request.
    gpus = models.PositiveIntegerField(default=0)
    cpus = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveIntegerField(default=0)

    cluster = models.ForeignKey(
        "compute.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    partition = models.CharField(max_length=64, blank=True, default="")
    # why it went to that cluster, in words (apps/jobs/services._placement)
    placement_reason = models.TextField(blank=True, default="")
    restart_count = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    checkpoint_dir = models.CharField(max_length=1024, blank=True, default="")
    latest_checkpoint = models.CharField(max_length=1024, blank=True, default="")
    latest_checkpoint_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "state"]),
            models.Index(fields=["project", "state"]),
            models.Index(fields=["cluster", "state"]),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.pk})"


class AttemptState(models.TextChoices):
    QUEUED = "QUEUED"  # waiting for the dispatcher
    SUBMITTING = "SUBMITTING"  # the dispatcher has started talking to the backend
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    LOST = "LOST"  # the backend no longer knows it and accounting has no record


ATTEMPT_ENDED = frozenset(
    {
        AttemptState.SUCCEEDED,
        AttemptState.FAILED,
        AttemptState.CANCELLED,
        AttemptState.TIMEOUT,
        AttemptState.NODE_FAIL,
        AttemptState.PREEMPTED,
        AttemptState.LOST,
    }
)


class JobAttempt(TenantModel):
    """One run of a job on a backend. Its id is the tag the backend job carries."""

    tenant_path = "job__tenant"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=AttemptState.choices, default="QUEUED")
    backend_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    backend_state = models.CharField(max_length=64, blank=True, default="")
    backend_reason = models.CharField(max_length=255, blank=True, default="")
    submit_started_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    nodes = models.JSONField(default=list, blank=True)
    accelerators = models.JSONField(default=dict, blank=True)
    excluded_nodes = models.JSONField(default=list, blank=True)
    resume_from = models.CharField(max_length=1024, blank=True, default="")
    not_before = models.DateTimeField(null=True, blank=True)  # restart backoff
    stdout_path = models.CharField(max_length=1024, blank=True, default="")
    stderr_path = models.CharField(max_length=1024, blank=True, default="")
    gpu_seconds = models.FloatField(default=0)
    cpu_seconds = models.FloatField(default=0)
    # both streams shipped to their end (apps/logs/shipper.py): the shipper looks no more
    logs_shipped = models.BooleanField(default=False)
    # the dataset versions the attempt was given to read (apps/jobs/staging.py)
    dataset_versions = models.ManyToManyField(
        "datasets.DatasetVersion", blank=True, related_name="attempts"
    )
    # an inference attempt's model version, read in place (apps/jobs/inference.py)
    model_version = models.ForeignKey(
        "registry.ModelVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="inference_attempts",
    )

    class Meta:
        ordering = ["job", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="uniq_attempt_number")
        ]
        indexes = [
            models.Index(fields=["state"]),
            models.Index(
                fields=["created_at"],
                condition=models.Q(logs_shipped=False),
                name="attempt_logs_unshipped",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job.name} #{self.number}"

    @property
    def tag(self) -> str:
        return f"torus:{self.pk}"


class JobEvent(TenantModel):
    """One state change on a job's timeline."""

    tenant_path = "job__tenant"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    attempt = models.ForeignKey(
        JobAttempt, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    from_state = models.CharField(max_length=16, blank=True, default="")
    to_state = models.CharField(max_length=16)
    reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.from_state or '-'} -> {self.to_state}"


class DatasetStage(TenantModel):
    """What staging an attempt's dataset versions took on one node: the stager's report
    (apps/compute/backends/stager.py), read when the attempt ends. Written by the job's own
    process, so it is a measurement, not a proof."""

    tenant_path = "attempt__job__tenant"

    attempt = models.ForeignKey(JobAttempt, on_delete=models.CASCADE, related_name="dataset_stages")
    node = models.CharField(max_length=64)
    cache = models.BooleanField(default=True)  # False: read from shared storage
    note = models.CharField(max_length=255, blank=True, default="")
    hits = models.PositiveIntegerField(default=0)  # files found in the node's cache
    misses = models.PositiveIntegerField(default=0)  # files copied into it
    bytes_staged = models.PositiveBigIntegerField(default=0)
    bytes_hit = models.PositiveBigIntegerField(default=0)
    evicted_bytes = models.PositiveBigIntegerField(default=0)
    seconds = models.FloatField(default=0)
    versions = models.JSONField(default=list, blank=True)  # per version: as, mode, counts

    class Meta:
        ordering = ["attempt", "node"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "node"], name="uniq_dataset_stage_node")
        ]
        indexes = [models.Index(fields=["node"])]

    def __str__(self) -> str:
        return f"{self.attempt} on {self.node}"
