"""Deployment serializers: shapes here, meaning (the model reference, counts, fit) in the
services."""

import re

from django.db.models import Count, Q
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.serializers import StrictSerializer
from apps.jobs.spec_fields import TOKEN_RE, FlexibleField, parse_memory_mb
from apps.serving.models import (
    Deployment,
    DeploymentEvent,
    DeploymentKey,
    KvCacheType,
    Replica,
    ReplicaState,
)

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
MAX_REPLICAS = 64


def _token(value):
    if value is not None and not TOKEN_RE.match(value):
        raise serializers.ValidationError("Letters, digits, '.', '_' and '-' only.")
    return value


class DeploymentLimitsMixin(serializers.Serializer):
    """Fields a create and an update share."""

    replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)
    replicas_min = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)
    replicas_max = serializers.IntegerField(min_value=1, max_value=MAX_REPLICAS, required=False)
    autoscale_target = serializers.FloatField(
        min_value=0.1,
        max_value=100,
        required=False,
        help_text="Requests (processing + waiting) per slot that autoscaling aims at.",
    )
    scale_to_zero_after_s = serializers.IntegerField(
        min_value=10,
        max_value=30 * 86400,
        required=False,
        allow_null=True,
        help_text="Seconds without a request before it scales to zero; null: never.",
    )
    tokens_per_minute = serializers.IntegerField(
        min_value=1, max_value=10**9, required=False, allow_null=True
    )
    max_request_bytes = serializers.IntegerField(
        min_value=1024, max_value=64 * 1024 * 1024, required=False
    )
    max_tokens = serializers.IntegerField(min_value=1, max_value=1024 * 1024, required=False)


class DeploymentCreateSerializer(DeploymentLimitsMixin, StrictSerializer):
    project = serializers.UUIDField()
    name = serializers.CharField(max_length=63)
    model = serializers.CharField(
        max_length=140, help_text="'<model>:<version>', '<model>@<alias>' (followed) or an id."
    )
    cluster = serializers.CharField(max_length=50, required=False)
    cpus = serializers.IntegerField(min_value=1, max_value=256, default=1)
    memory = FlexibleField(parse_memory_mb, default=1024, help_text="Per replica: '4G' or MiB.")
    gpus = serializers.IntegerField(min_value=0, max_value=16, default=0)
    gpu_type = serializers.CharField(max_length=64, required=False)
    accelerator = serializers.CharField(max_length=64, default="gpu")
    partition = serializers.CharField(max_length=64, required=False)
    slots = serializers.IntegerField(min_value=1, max_value=256, default=4)
    context = serializers.IntegerField(
        min_value=16, max_value=1024 * 1024, default=2048, help_text="Tokens per slot."
    )
    kv_cache_type = serializers.ChoiceField(choices=KvCacheType.choices, default=KvCacheType.F16)
    dry_run = serializers.BooleanField(
        default=False, help_text="Check everything (model, counts, fit, name) and write nothing."
    )

    def validate_name(self, value):
        if not NAME_RE.match(value):
            raise serializers.ValidationError(
                "1-63 lowercase letters, digits or '-', starting and ending with a letter or digit."
            )
        return value

    def validate_model(self, value):
        from apps.jobs.inference import model_ref_problem

        problem = model_ref_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate_cluster(self, value):
        from apps.compute.backends import backend_class
        from apps.compute.models import Cluster

        cluster = Cluster.objects.filter(name=value).first()
        if cluster is None:
            raise serializers.ValidationError(f"No cluster named {value!r}.")
        # where the cluster's engine lies is the backend's to say (Backend.serving_problem)
        problem = backend_class(cluster).serving_problem(config=cluster.config or {})
        if problem:
            raise serializers.ValidationError(f"Cluster {value!r} {problem}")
        return cluster

    validate_gpu_type = staticmethod(_token)
    validate_accelerator = staticmethod(_token)
    validate_partition = staticmethod(_token)

    def validate(self, attrs):
        attrs = dict(attrs)
        attrs["memory_mb"] = attrs.pop("memory")
        return attrs


class DeploymentUpdateSerializer(DeploymentLimitsMixin, StrictSerializer):
    model = serializers.CharField(
        max_length=140, required=False, help_text="Another version of the deployed model."
    )

    def validate_model(self, value):
        return DeploymentCreateSerializer().validate_model(value)

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError({"non_field_errors": ["Nothing to change."]})
        return attrs


class ReplicaSerializer(serializers.ModelSerializer):
    version = serializers.SerializerMethodField()
    job_state = serializers.CharField(source="job.state", read_only=True, default=None)

    class Meta:
        model = Replica
        fields = [
            "id",
            "state",
            "state_reason",
            "version",
            "job",
            "job_state",
            "host",
            "port",
            "ready_at",
            "last_ok_at",
            "failures",
            "created_at",
            "stopped_at",
        ]
        read_only_fields = fields

    def get_version(self, obj) -> int:
        return obj.version.number


class DeploymentEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeploymentEvent
        fields = ["id", "kind", "message", "data", "created_at"]
        read_only_fields = fields


class DeploymentKeySerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)

    class Meta:
        model = DeploymentKey
        fields = ["id", "name", "prefix", "created_by", "revoked_at", "created_at"]
        read_only_fields = fields


class DeploymentKeyCreatedSerializer(DeploymentKeySerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once.")

    class Meta(DeploymentKeySerializer.Meta):
        fields = [*DeploymentKeySerializer.Meta.fields, "token"]
        read_only_fields = fields


class KeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)

    def validate_name(self, value):
        if not TOKEN_RE.match(value):
            raise serializers.ValidationError("Letters, digits, '.', '_' and '-' only.")
        return value


class VersionRefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    number = serializers.IntegerField()


class ReplicaCountsSerializer(serializers.Serializer):
    desired = serializers.IntegerField()
    min = serializers.IntegerField()
    max = serializers.IntegerField()
    ready = serializers.IntegerField()
    live = serializers.IntegerField(help_text="Starting or ready.")


class ResourcesSerializer(serializers.Serializer):
    cpus = serializers.IntegerField()
    memory_mb = serializers.IntegerField()
    gpus = serializers.IntegerField()
    gpu_type = serializers.CharField(allow_null=True)
    accelerator = serializers.CharField()
    partition = serializers.CharField(allow_null=True)


class LimitsSerializer(serializers.Serializer):
    tokens_per_minute = serializers.IntegerField(allow_null=True)
    max_request_bytes = serializers.IntegerField()
    max_tokens = serializers.IntegerField()


class DeploymentUsageStatsSerializer(serializers.Serializer):
    # what a minute of the series and the totals share
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    requests_per_s = serializers.FloatField()
    latency_p50_ms = serializers.FloatField(allow_null=True)
    latency_p95_ms = serializers.FloatField(allow_null=True)
    ttft_p50_ms = serializers.FloatField(allow_null=True)
    ttft_p95_ms = serializers.FloatField(allow_null=True)


class DeploymentUsagePointSerializer(DeploymentUsageStatsSerializer):
    t = serializers.DateTimeField()
    tokens_in_per_min = serializers.IntegerField()
    tokens_out_per_min = serializers.IntegerField()


class DeploymentUsageTotalsSerializer(DeploymentUsageStatsSerializer):
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()


class DeploymentUsageSerializer(serializers.Serializer):
    """The gateway's records of a deployment, per minute (apps/serving/records.py)."""

    deployment = serializers.UUIDField()
    minutes = serializers.IntegerField()
    step_s = serializers.IntegerField()
    series = DeploymentUsagePointSerializer(many=True)
    totals = DeploymentUsageTotalsSerializer()


class FitEstimateSerializer(serializers.Serializer):
    fits = serializers.BooleanField(allow_null=True, help_text="null: device memory unknown.")
    reason = serializers.CharField()
    tensor_parallel = serializers.IntegerField(allow_null=True)
    per_device_bytes = serializers.IntegerField()
    breakdown = serializers.DictField(child=serializers.IntegerField())


class DryRunSerializer(serializers.Serializer):
    """What a create would do (`dry_run: true`): checked as a create, nothing written."""

    fit = FitEstimateSerializer()
    version = serializers.IntegerField()
    follow_alias = serializers.CharField()


class DeploymentSerializer(serializers.ModelSerializer):
    project_slug = serializers.CharField(source="project.slug", read_only=True)
    model_name = serializers.CharField(source="model.name", read_only=True)
    version = serializers.SerializerMethodField()
    replicas = serializers.SerializerMethodField()
    resources = serializers.SerializerMethodField()
    limits = serializers.SerializerMethodField()
    gateway = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username", read_only=True)

    class Meta:
        model = Deployment
        fields = [
            "id",
            "tenant",
            "project",
            "project_slug",
            "name",
            "model",
            "model_name",
            "ref",
            "follow_alias",
            "version",
            "runtime",
            "state",
            "state_reason",
            "replicas",
            "resources",
            "slots",
            "context",
            "kv_cache_type",
            "autoscale_target",
            "scale_to_zero_after_s",
            "limits",
            "gateway",
            "last_request_at",
            "created_by",
            "created_at",
            "updated_at",
            "archived_at",
        ]
        read_only_fields = fields

    @staticmethod
    def with_counts(rows):
        """Each deployment with its ready and live replica counts, in the same query."""
        return rows.annotate(
            ready_count=Count("replicas", filter=Q(replicas__state=ReplicaState.READY)),
            live_count=Count(
                "replicas",
                filter=Q(replicas__state__in=[ReplicaState.STARTING, ReplicaState.READY]),
            ),
        )

    @extend_schema_field(VersionRefSerializer)
    def get_version(self, obj) -> dict:
        return {"id": str(obj.version_id), "number": obj.version.number}

    @extend_schema_field(ReplicaCountsSerializer)
    def get_replicas(self, obj) -> dict:
        if hasattr(obj, "ready_count"):
            ready, live = obj.ready_count, obj.live_count
        else:
            states = list(obj.replicas.values_list("state", flat=True))
            ready = states.count(ReplicaState.READY)
            live = ready + states.count(ReplicaState.STARTING)
        return {
            "desired": obj.replicas_desired,
            "min": obj.replicas_min,
            "max": obj.replicas_max,
            "ready": ready,
            "live": live,
        }

    @extend_schema_field(ResourcesSerializer)
    def get_resources(self, obj) -> dict:
        return {
            "cpus": obj.cpus,
            "memory_mb": obj.memory_mb,
            "gpus": obj.gpus,
            "gpu_type": obj.gpu_type or None,
            "accelerator": obj.accelerator,
            "partition": obj.partition or None,
        }

    @extend_schema_field(LimitsSerializer)
    def get_limits(self, obj) -> dict:
        return {
            "tokens_per_minute": obj.tokens_per_minute,
            "max_request_bytes": obj.max_request_bytes,
            "max_tokens": obj.max_tokens,
        }

    def get_gateway(self, obj) -> str:
        return f"/serve/{obj.pk}/v1"
