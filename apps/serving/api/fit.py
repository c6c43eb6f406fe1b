"""POST /api/v1/fit/: does a model fit these accelerators, and with which tensor-parallel
degree? An estimate from the model's config.json, or from the header of a registered GGUF
version the caller may read (apps/compute/fit.py); nothing is written."""

import dataclasses

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.compute import fit
from apps.compute.fit_fields import HFConfigField, TrainingShapeSerializer
from apps.compute.model_config import ModelConfig, config_from_dict
from apps.jobs.inference import model_ref_problem
from apps.jobs.spec_fields import TOKEN_RE, FlexibleField, parse_memory_mb
from apps.serving.gguf_config import GGUFError, config_from_gguf
from apps.tenancy.access import actor_for
from apps.tenancy.api.permissions import restrict

# weights as stored for serving: (elements per block, bytes per block)
WEIGHT_TYPES = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_k": (256, 144),
}
INFERENCE_FIELDS = ("slots", "context", "kv_cache_type", "weights_type")
TRAINING_FIELDS = tuple(TrainingShapeSerializer().fields)


class FitRequestSerializer(TrainingShapeSerializer):
    model_config = HFConfigField(required=False)
    model = serializers.CharField(
        max_length=140,
        required=False,
        help_text="Instead of model_config: a registered GGUF version of `project`, as"
        " '<model>:<version>', '<model>@<alias>' or a version id (inference).",
    )
    project = serializers.UUIDField(required=False, help_text="The project of `model`.")
    workload = serializers.ChoiceField(choices=["inference", "training"], default="inference")
    accelerator = serializers.CharField(
        max_length=50, default="gpu", help_text="The accelerator type's GRES name."
    )
    gpu_type = serializers.CharField(max_length=64, required=False, allow_null=True, default=None)
    gpus = serializers.IntegerField(
        min_value=0,
        max_value=1024,
        default=1,
        help_text="Accelerators per replica (inference) or in all (training); 0: CPU only.",
    )
    memory = FlexibleField(
        parse_memory_mb, default=1024, help_text="Host memory ('4G' or MiB) when gpus is 0."
    )
    slots = serializers.IntegerField(min_value=1, max_value=1024, default=4)
    context = serializers.IntegerField(
        min_value=1, max_value=1 << 22, default=2048, help_text="Tokens per slot."
    )
    kv_cache_type = serializers.ChoiceField(choices=fit.KV_TYPE_NAMES, default="f16")
    weights_type = serializers.ChoiceField(
        choices=sorted(WEIGHT_TYPES),
        required=False,
        help_text="How the weights are stored when served (default: the config's torch_dtype).",
    )

    def validate_accelerator(self, value):
        if not TOKEN_RE.match(value):
            raise serializers.ValidationError("Letters, digits, '.', '_' and '-' only.")
        return value

    def validate_gpu_type(self, value):
        if value is not None and not TOKEN_RE.match(value):
            raise serializers.ValidationError("Letters, digits, '.', '_' and '-' only.")
        return value

    def validate(self, attrs):
        from apps.compute.models import AcceleratorType

        given = set(self.initial_data) if isinstance(self.initial_data, dict) else set()
        other = INFERENCE_FIELDS if attrs["workload"] == "training" else TRAINING_FIELDS
        errors = {name: [f"Not for a {attrs['workload']} estimate."] for name in other}
        errors = {name: reason for name, reason in errors.items() if name in given}
        if ("model_config" in attrs) == ("model" in attrs):
            errors["model_config"] = ["Give model_config or model (a registered version), one."]
        if "model" in attrs:
            problem = model_ref_problem(attrs["model"])
            if problem:
                errors["model"] = [problem]
            if "project" not in attrs:
                errors["project"] = ["Required with model."]
            if attrs["workload"] == "training":
                errors["model"] = ["A registered GGUF is for an inference estimate."]
        elif "project" in attrs:
            errors["project"] = ["Only with model."]
        name = attrs["accelerator"]
        if attrs["gpus"] and not AcceleratorType.objects.filter(gres_name=name).exists():
            errors["accelerator"] = [f"No accelerator type with GRES name {name!r}."]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class FitReportSerializer(serializers.Serializer):
    fits = serializers.BooleanField(allow_null=True, help_text="null: device memory unknown.")
    reason = serializers.CharField()
    workload = serializers.CharField()
    devices = serializers.IntegerField()
    device_name = serializers.CharField()
    device_memory_bytes = serializers.IntegerField(allow_null=True)
    tensor_parallel = serializers.IntegerField(allow_null=True)
    needed_devices = serializers.IntegerField(allow_null=True)
    per_device_bytes = serializers.IntegerField()
    breakdown = serializers.DictField(child=serializers.IntegerField())
    tokens = serializers.IntegerField()
    model = serializers.DictField()


def registered_config(*, actor, project_id, ref: str) -> ModelConfig:
    """The shape of a registered version's .gguf, read from its header: the project among
    those the actor may read (another tenant's is a 404), the version as jobs resolve it
    (a 400 at `model` when there is none, or it is no GGUF)."""
    from apps.jobs.inference import model_path, model_resolve
    from apps.serving.replicas import model_file
    from apps.tenancy.models import Project

    project = restrict(
        Project.objects.filter(pk=project_id),
        actor=actor,
        resource="project",
        action="read",
        listing=True,
    ).first()
    if project is None:
        raise NotFound("No such project.")
    version = model_resolve(actor=actor, project=project, ref=ref)
    name = model_file(version)
    try:
        if not name:
            raise GGUFError("it has no .gguf file")
        return config_from_gguf(model_path(version) / name)
    except (GGUFError, OSError) as exc:
        label = f"{version.model.name}:{version.number}"
        raise serializers.ValidationError(
            {"model": [f"Version {label} is not a GGUF model ({exc})."]}
        ) from None


def estimate(data: dict, *, actor) -> fit.FitReport:
    """A validated FitRequestSerializer's data -> the report."""
    common = dict(
        accelerator=data["accelerator"],
        gpu_type=data["gpu_type"],
        gpus=data["gpus"],
        memory_mb=data["memory"],
    )
    if data["workload"] == "training":
        return fit.check_training(
            model_config=config_from_dict(
                data["model_config"], dtype=fit.PRECISIONS[data["precision"]]
            ),
            batch_size=data["batch_size"],
            sequence_length=data["sequence_length"],
            precision=data["precision"],
            optimizer=data["optimizer"],
            gradient_checkpointing=data["gradient_checkpointing"],
            **common,
        )
    if "model" in data:
        model = registered_config(actor=actor, project_id=data["project"], ref=data["model"])
    else:
        model = config_from_dict(data["model_config"])
    if "weights_type" in data:
        block, size = WEIGHT_TYPES[data["weights_type"]]
        model = dataclasses.replace(
            model,
            weights_bytes=-(-model.parameters // block) * size,
            weights_dtype=data["weights_type"],
        )
    return fit.check_deployment(
        model_config=model,
        slots=data["slots"],
        context=data["context"],
        kv_cache_type=data["kv_cache_type"],
        **common,
    )


class FitView(APIView):
    """Estimate the memory a model needs (weights, KV cache, activations; for training also
    gradients and optimizer state) and whether it fits: the smallest tensor-parallel degree
    that does, or why none does. Any signed-in user; nothing is stored."""

    resource, policy_action = "fit", "estimate"

    @extend_schema(request=FitRequestSerializer, responses={200: FitReportSerializer})
    def post(self, request):
        data = FitRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        report = estimate(data.validated_data, actor=actor_for(request))
        return Response(FitReportSerializer(report.as_dict()).data)
