"""Job responses. Requests are validated by apps/jobs/spec.py."""

from rest_framework import serializers

from apps.core.api.serializers import RenderableJSONField
from apps.jobs.estimate_store import estimates_read
from apps.jobs.models import DatasetStage, Job, JobAttempt, JobEvent


class JobEventSerializer(serializers.ModelSerializer):
    attempt = serializers.IntegerField(source="attempt.number", default=None, read_only=True)

    class Meta:
        model = JobEvent
        fields = ["created_at", "from_state", "to_state", "reason", "attempt"]
        read_only_fields = fields


class DatasetStageSerializer(serializers.ModelSerializer):
    class Meta:
        model = DatasetStage
        fields = [
            "node",
            "cache",
            "note",
            "hits",
            "misses",
            "bytes_staged",
            "bytes_hit",
            "evicted_bytes",
            "seconds",
            "versions",
        ]
        read_only_fields = fields


class AttemptDatasetVersionSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    dataset = serializers.UUIDField(source="dataset_id", read_only=True)
    ref = serializers.CharField(source="__str__", read_only=True)
    number = serializers.IntegerField(read_only=True)


class AttemptModelVersionSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    model = serializers.UUIDField(source="model_id", read_only=True)
    ref = serializers.CharField(source="__str__", read_only=True)
    number = serializers.IntegerField(read_only=True)


class JobAttemptSerializer(serializers.ModelSerializer):
    dataset_versions = AttemptDatasetVersionSerializer(many=True, read_only=True)
    # an inference attempt's model version (apps/jobs/inference.py); null for others
    model_version = AttemptModelVersionSerializer(read_only=True, allow_null=True)
    dataset_cache = DatasetStageSerializer(source="dataset_stages", many=True, read_only=True)

    class Meta:
        model = JobAttempt
        fields = [
            "id",
            "number",
            "state",
            "backend_id",
            "backend_state",
            "backend_reason",
            "nodes",
            "excluded_nodes",
            "resume_from",
            "submitted_at",
            "started_at",
            "ended_at",
            "exit_code",
            "signal",
            "reason",
            "stdout_path",
            "stderr_path",
            "gpu_seconds",
            "cpu_seconds",
            "dataset_versions",
            "dataset_cache",
            "model_version",
        ]
        read_only_fields = fields


class ExpectedStartSerializer(serializers.Serializer):
    """apps/jobs/estimates.py: a waiting job's predicted start, or why it cannot start."""

    p10 = serializers.DateTimeField(allow_null=True, help_text="Early end of the range.")
    p50 = serializers.DateTimeField(allow_null=True, help_text="The most likely start.")
    p90 = serializers.DateTimeField(allow_null=True, help_text="Late end of the range.")
    computed_at = serializers.DateTimeField()
    basis = serializers.CharField(help_text="What the prediction rests on, in words.")
    cannot_start = serializers.CharField(
        help_text="Why waiting will not start the job (no time is given then); '' otherwise."
    )


class JobListSerializer(serializers.ListSerializer):
    """The page's expected starts read together: one Redis round trip, not one per job."""

    def to_representation(self, data):
        jobs = list(data.all() if hasattr(data, "all") else data)
        found = estimates_read(jobs=jobs)
        for job in jobs:
            job.expected_start = found.get(str(job.pk))
        return super().to_representation(jobs)


class JobSerializer(serializers.ModelSerializer):
    project = serializers.UUIDField(source="project_id", read_only=True)
    project_slug = serializers.CharField(source="project.slug", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)
    cluster = serializers.CharField(source="cluster.name", default=None, read_only=True)
    # annotated by the list (JobViewSet.get_queryset: logs' subquery, apps/jobs/extras.py)
    signatures = serializers.ListField(
        child=serializers.CharField(),
        source="signature_names",
        default=list,
        read_only=True,
        help_text="Failure signatures its failed attempts matched, by name.",
    )
    expected_start = ExpectedStartSerializer(
        read_only=True,
        allow_null=True,
        help_text="While it waits: when it is expected to start (null once it has started).",
    )

    class Meta:
        model = Job
        list_serializer_class = JobListSerializer
        fields = [
            "id",
            "name",
            "kind",
            "project",
            "project_slug",
            "user",
            "state",
            "state_reason",
            "queue_position",
            "expected_start",
            "priority",
            "labels",
            "gpus",
            "cpus",
            "memory_mb",
            "cluster",
            "partition",
            "placement_reason",
            "restart_count",
            "cancel_requested",
            "checkpoint_dir",
            "latest_checkpoint",
            "exit_code",
            "created_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "signatures",
        ]
        read_only_fields = fields

    def to_representation(self, instance):
        if not hasattr(instance, "expected_start"):  # one job (a list reads them together)
            instance.expected_start = estimates_read(jobs=[instance]).get(str(instance.pk))
        return super().to_representation(instance)


class JobDetailSerializer(JobSerializer):
    spec = RenderableJSONField(read_only=True)
    signatures = serializers.SerializerMethodField()
    attempts = JobAttemptSerializer(many=True, read_only=True)
    events = JobEventSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "spec", "attempts", "events"]
        read_only_fields = fields

    def get_signatures(self, obj) -> list[str]:
        """Failure signatures the job's failed attempts matched."""
        names = getattr(obj, "signature_names", None)  # annotated by JobViewSet's retrieve (extras)
        return sorted(names) if names is not None else _signature_names(obj)


def _signature_names(job) -> list[str]:
    return sorted({m.signature.name for m in job.signature_matches.select_related("signature")})


class JobBatchSerializer(serializers.Serializer):
    jobs = serializers.ListField(
        child=serializers.DictField(),
        min_length=1,
        max_length=1000,
        help_text="Job specs, as for POST /api/v1/jobs/.",
    )

    def to_internal_value(self, data):
        if isinstance(data, dict) and set(data) - {"jobs"}:
            raise serializers.ValidationError(
                {name: ["Unknown field."] for name in sorted(set(data) - {"jobs"})}
            )
        return super().to_internal_value(data)


class JobBatchResultSerializer(serializers.Serializer):
    results = JobSerializer(many=True)


class NodeCacheSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    node = serializers.CharField()
    attempts = serializers.IntegerField()
    hits = serializers.IntegerField()
    misses = serializers.IntegerField()
    bytes_staged = serializers.IntegerField()
    bytes_hit = serializers.IntegerField()
    evicted_bytes = serializers.IntegerField()
