"""The job spec's sections: resources, environment, distributed launch, restart policy, the
dataset versions a job reads, and what a succeeded job registers (a model, predictions)."""

from rest_framework import serializers

from apps.jobs.spec_fields import (
    ALIAS_RE,
    DATASET_AS_RE,
    IMAGE_RE,
    MAX_PATH,
    MODEL_NAME_RE,
    NAME_RE,
    RETRYABLE,
    TOKEN_RE,
    ClosedSerializer,
    FlexibleField,
    absolute_path,
    no_control,
    parse_memory_mb,
    parse_minutes,
)


class RegisterModelSerializer(ClosedSerializer):
    """On success, register <job dir>/<path> as a new version of model `name` (docs/registry.md)."""

    name = serializers.CharField(max_length=100)
    path = serializers.CharField(max_length=1000, default="model")
    alias = serializers.CharField(max_length=40, required=False)
    framework = serializers.CharField(max_length=64, required=False)

    def validate_name(self, value):
        if not MODEL_NAME_RE.match(value):
            raise serializers.ValidationError(
                "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit."
            )
        return value

    def validate_path(self, value):
        no_control(value)
        parts = value.split("/")
        if value.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise serializers.ValidationError(
                "A relative path inside the job's directory, without '.' or '..' parts."
            )
        return value

    def validate_alias(self, value):
        if not ALIAS_RE.match(value) or value == "latest":
            raise serializers.ValidationError(
                "Lowercase letters, digits, '_' or '-', starting with a letter."
            )
        return value


class OutputDatasetSerializer(ClosedSerializer):
    """An inference job's predictions: on success, <job dir>/<path> becomes a new committed
    version of dataset `name` (made if missing; docs/jobs.md, Batch inference)."""

    name = serializers.CharField(max_length=64)
    path = serializers.CharField(max_length=1000, default="predictions")

    def validate_name(self, value):
        if not NAME_RE.match(value):
            raise serializers.ValidationError(
                "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit."
            )
        return value

    def validate_path(self, value):
        from apps.datasets.paths import file_path_problem

        problem = file_path_problem(value)  # relative, no '.'/'..', also once decoded
        if problem:
            raise serializers.ValidationError(problem)
        return value


class ResourcesSerializer(ClosedSerializer):
    nodes = serializers.IntegerField(min_value=1, max_value=64, default=1)
    tasks_per_node = serializers.IntegerField(min_value=1, max_value=128, default=1)
    gpus_per_node = serializers.IntegerField(min_value=0, max_value=16, default=0)
    gpu_type = serializers.CharField(max_length=64, required=False, allow_null=True, default=None)
    accelerator = serializers.CharField(max_length=64, default="gpu")
    cpus_per_task = serializers.IntegerField(min_value=1, max_value=256, default=1)
    memory = FlexibleField(parse_memory_mb, default=1024, help_text="Per node: '4G' or MiB.")
    time_limit = FlexibleField(parse_minutes, default=60, help_text="'HH:MM:SS' or minutes.")
    partition = serializers.CharField(max_length=64, required=False, allow_null=True, default=None)

    def validate_gpu_type(self, value):
        if value is not None and not TOKEN_RE.match(value):
            raise serializers.ValidationError("Letters, digits, '.', '_' and '-' only.")
        return value

    def validate_accelerator(self, value):
        if not TOKEN_RE.match(value):
            raise serializers.ValidationError("Letters, digits, '.', '_' and '-' only.")
        return value

    def validate_partition(self, value):
        if value is not None and not TOKEN_RE.match(value):
            raise serializers.ValidationError("Letters, digits, '.', '_' and '-' only.")
        return value


class EnvironmentSerializer(ClosedSerializer):
    type = serializers.ChoiceField(choices=["none", "venv", "conda", "container"], default="none")
    path = serializers.CharField(required=False, allow_blank=False, max_length=MAX_PATH)
    image = serializers.CharField(required=False, allow_blank=False, max_length=255)

    def validate_path(self, value):
        return absolute_path(value)

    def validate_image(self, value):
        if not IMAGE_RE.match(value):
            raise serializers.ValidationError("Not a valid image reference.")
        return value

    def validate(self, attrs):
        kind = attrs.get("type", "none")
        if kind in ("venv", "conda") and not attrs.get("path"):
            raise serializers.ValidationError({"path": [f"Required for a {kind} environment."]})
        if kind == "container" and not attrs.get("image"):
            raise serializers.ValidationError({"image": ["Required for a container."]})
        return attrs


class DistributedSerializer(ClosedSerializer):
    launcher = serializers.ChoiceField(
        choices=["none", "torchrun", "deepspeed", "mpirun"], default="none"
    )
    master_port = serializers.IntegerField(min_value=1024, max_value=65535, required=False)


class RestartPolicySerializer(ClosedSerializer):
    max_restarts = serializers.IntegerField(min_value=0, max_value=20, default=3)
    retry_on = serializers.ListField(
        child=serializers.ChoiceField(choices=RETRYABLE), default=list(RETRYABLE)
    )
    exit_codes = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=255), default=list, max_length=50
    )
    backoff_seconds = serializers.IntegerField(min_value=0, max_value=3600, default=5)


class DatasetRefSerializer(ClosedSerializer):
    """One dataset version a job reads: {"version": "<name>:<n>" or id, "as": "TRAIN"}."""

    version = serializers.CharField(max_length=100)
    # what a stored spec shows beside the version id ("corpus:3"); resubmitting it is allowed
    ref = serializers.CharField(max_length=100, required=False, write_only=True)

    def get_fields(self):
        fields = super().get_fields()
        fields["as"] = serializers.CharField(
            max_length=32, help_text="The job finds it at $TORUS_DATASET_<as>."
        )
        return fields

    def validate_version(self, value):
        from apps.jobs.staging import version_problem

        problem = version_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate(self, attrs):
        if not DATASET_AS_RE.match(attrs["as"]):
            raise serializers.ValidationError(
                {"as": ["Upper-case letters, digits and '_', starting with a letter."]}
            )
        return attrs
