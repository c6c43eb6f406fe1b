"""The job spec: the whole spec's validation with field-by-field errors, the checks made
against its tenant, project and cluster at submission, and normalisation with defaults.

Everything a user writes is checked here (its values: spec_fields.py; its sections:
spec_sections.py), before it can reach a batch request.
"""

from rest_framework import serializers

from apps.compute.backends import backend_class
from apps.compute.fit_fields import TrainingFitSerializer
from apps.core.api.serializers import BoundedDictField
from apps.identity.storage import path_problem
from apps.jobs.models import Kind
from apps.jobs.spec_fields import (
    ENV_KEY_RE,
    LABEL_VALUE_RE,
    MAX_ARG,
    MAX_PATH,
    NAME_RE,
    RESERVED_ENV,
    RESERVED_ENV_PREFIXES,
    ClosedSerializer,
    CommandField,
    EnvValueField,
    absolute_path,
    label_key_problem,
)
from apps.jobs.spec_sections import (
    DatasetRefSerializer,
    DistributedSerializer,
    EnvironmentSerializer,
    OutputDatasetSerializer,
    RegisterModelSerializer,
    ResourcesSerializer,
    RestartPolicySerializer,
)


class JobSpecSerializer(ClosedSerializer):
    project = serializers.UUIDField()
    name = serializers.CharField(max_length=64)
    cluster = serializers.CharField(
        max_length=50,
        required=False,
        help_text="The cluster's name; else the project's, the tenant's or the platform's default.",
    )
    kind = serializers.ChoiceField(choices=Kind.choices, default=Kind.TRAINING)
    command = CommandField()
    working_dir = serializers.CharField(required=False, max_length=MAX_PATH)
    env = BoundedDictField(child=EnvValueField(), max_items=200, default=dict)
    secrets = serializers.ListField(
        child=serializers.CharField(max_length=128),
        required=False,
        max_length=100,
        help_text="Project secrets by name: the job gets each as $NAME (docs/jobs.md).",
    )
    environment = EnvironmentSerializer(default=dict)
    resources = ResourcesSerializer(default=dict)
    distributed = DistributedSerializer(default=dict)
    restart_policy = RestartPolicySerializer(default=dict)
    priority = serializers.IntegerField(min_value=-1000, max_value=1000, default=0)
    register_model = RegisterModelSerializer(required=False)
    labels = BoundedDictField(
        child=serializers.CharField(allow_blank=True, max_length=63),
        max_items=32,
        max_key_length=317,  # prefix (253) / name (63)
        default=dict,
    )
    datasets = serializers.ListField(child=DatasetRefSerializer(), default=list, max_length=16)
    dataset_cache = serializers.BooleanField(
        default=True, help_text="Stage datasets into the node's cache (false: read in place)."
    )
    model = serializers.CharField(
        max_length=140,
        required=False,
        help_text="Inference: '<model>:<version>', '<model>@<alias>' or a version id.",
    )
    output_dataset = OutputDatasetSerializer(required=False)
    model_config = TrainingFitSerializer(
        required=False,
        help_text="Training: the model's config.json and the step's shape; the job is refused"
        " when the estimate says it cannot fit the accelerators asked for (docs/serving.md).",
    )

    NESTED = ("environment", "resources", "distributed", "restart_policy")

    def to_internal_value(self, data):
        if isinstance(data, dict):  # absent sections still get their defaults filled in
            data = {**{key: {} for key in self.NESTED}, **data}
        return super().to_internal_value(data)

    def validate_name(self, value):
        if not NAME_RE.match(value):
            raise serializers.ValidationError(
                "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit."
            )
        return value

    def validate_working_dir(self, value):
        return absolute_path(value)

    def validate_cluster(self, value):
        from apps.compute.models import Cluster

        if not Cluster.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"No cluster named {value!r}.")
        return value

    def validate_env(self, value):
        if len(value) > 200:
            raise serializers.ValidationError("At most 200 variables.")
        errors = {}
        for key, item in value.items():
            if not ENV_KEY_RE.match(key):
                errors[key] = ["Not a valid variable name."]
            elif key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
                errors[key] = ["Set by the platform; choose another name."]
            elif isinstance(item, dict):
                continue  # a secret's name (EnvValueField); that it exists: secrets_check
            elif "\x00" in item:
                errors[key] = ["Must not contain NUL characters."]
            elif len(item) > MAX_ARG:
                errors[key] = ["At most 32 KiB."]
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def validate_secrets(self, value):
        from apps.secrets.rules import name_problem

        if len(set(value)) != len(value):
            raise serializers.ValidationError("Each secret once.")
        problems = [f"{name}: {problem}" for name in value if (problem := name_problem(name))]
        if problems:
            raise serializers.ValidationError(problems)
        return value

    def validate_datasets(self, value):
        names = [item["as"] for item in value]
        if len(set(names)) != len(names):
            raise serializers.ValidationError("Each dataset needs its own 'as' name.")
        return value

    def validate_model(self, value):
        from apps.jobs.inference import model_ref_problem

        problem = model_ref_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate(self, attrs):
        inference = attrs.get("kind") == Kind.INFERENCE
        errors = {}
        for field in ("model", "output_dataset"):
            if inference and field not in attrs:
                errors[field] = ["Required for an inference job."]
            elif not inference and field in attrs:
                errors[field] = ["Only for an inference job (kind: inference)."]
        both = set(attrs.get("secrets") or []) & set(attrs.get("env") or {})
        if both:
            errors["secrets"] = [f"Also set in env: {', '.join(sorted(both))}."]
        if "model_config" in attrs:
            if attrs.get("kind", Kind.TRAINING) != Kind.TRAINING:
                errors["model_config"] = ["Only for a training job (kind: training)."]
            else:
                problem = fit_problem(attrs)
                if problem:
                    errors["model_config"] = [problem]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def validate_labels(self, value):
        if len(value) > 32:
            raise serializers.ValidationError("At most 32 labels.")
        errors = {}
        for key, item in value.items():
            problem = label_key_problem(key)
            if problem:
                errors[key] = [problem]
            elif not LABEL_VALUE_RE.match(item):
                errors[key] = [
                    "Values: up to 63 letters, digits, '.', '_' or '-', starting and ending"
                    " with a letter or digit."
                ]
        if errors:
            raise serializers.ValidationError(errors)
        return value


def fit_problem(attrs: dict) -> str:
    """'' unless the training job's model_config cannot fit the accelerators (or, with none,
    the memory) it asks for: then the estimate's reason (apps/compute/fit.py)."""
    from apps.compute import fit
    from apps.compute.model_config import config_from_dict

    shape, resources = attrs["model_config"], attrs["resources"]
    report = fit.check_training(
        model_config=config_from_dict(shape["config"], dtype=fit.PRECISIONS[shape["precision"]]),
        accelerator=resources["accelerator"],
        gpu_type=resources["gpu_type"],
        gpus=resources["nodes"] * resources["gpus_per_node"],
        memory_mb=resources["memory"],
        batch_size=shape["batch_size"],
        sequence_length=shape["sequence_length"],
        precision=shape["precision"],
        optimizer=shape["optimizer"],
        gradient_checkpointing=shape["gradient_checkpointing"],
    )
    return report.reason if report.fits is False else ""


def paths_check(*, spec: dict, tenant) -> None:
    """The paths a job names lie in its tenant's tree or a shared read-only root (a 400
    naming the field and the rule otherwise); the job's own identity is the platform's
    choice, never the spec's."""
    errors: dict = {}
    if spec.get("working_dir"):
        problem = path_problem(spec["working_dir"], tenant=tenant)
        if problem:
            errors["working_dir"] = [problem]
    if spec["environment"].get("path"):
        problem = path_problem(spec["environment"]["path"], tenant=tenant)
        if problem:
            errors["environment"] = {"path": [problem]}
    if errors:
        raise serializers.ValidationError(errors)


def image_check(*, spec: dict, tenant, cluster) -> None:
    """A container image only where the cluster runs containers (placement sees to that),
    from a registry the tenant allows (Tenant.image_registries) or the cluster's default
    image; where every job runs in one (Backend.requires_image), an image either way: a
    400 at environment.image with the reason otherwise."""
    from apps.tenancy.images import image_problem

    default_image = str((cluster.config or {}).get("default_image", ""))
    if spec["environment"]["type"] != "container":
        if backend_class(cluster).requires_image and not default_image:
            raise serializers.ValidationError(
                {
                    "environment": {
                        "image": [
                            f"Cluster {cluster.name} runs every job in a container and has no"
                            " default image: give environment {type: container, image: ...}."
                        ]
                    }
                }
            )
        return
    problem = image_problem(
        image=spec["environment"]["image"],
        registries=list(tenant.image_registries or []),
        default_image=default_image,
    )
    if problem:
        raise serializers.ValidationError({"environment": {"image": [problem]}})


def secrets_check(*, spec: dict, project) -> None:
    """Every secret a spec names exists in its project (one query, only for a spec that names
    any): a 400 at `secrets` or `env.<VAR>` naming the missing one otherwise."""
    from apps.secrets.services import missing_secrets, spec_secret_refs

    refs = spec_secret_refs(spec)
    if not refs:
        return
    missing = missing_secrets(project=project, names=set(refs.values()))
    if not missing:
        return
    errors: dict = {}
    listed = [name for name in spec.get("secrets") or [] if name in missing]
    if listed:
        errors["secrets"] = [
            f"No secret named {name} in project {project.slug}." for name in listed
        ]
    env = {
        var: [f"No secret named {value['secret']} in project {project.slug}."]
        for var, value in (spec.get("env") or {}).items()
        if isinstance(value, dict) and value["secret"] in missing
    }
    if env:
        errors["env"] = env
    raise serializers.ValidationError(errors)


def normalise(validated: dict) -> dict:
    """The stored form of a validated spec: plain JSON, every default filled in."""
    spec = {key: value for key, value in validated.items() if key != "project"}
    spec["environment"] = {"type": "none", **spec.get("environment", {})}
    return spec


def totals(spec: dict) -> dict:
    """What a job asks for, over all its nodes: what admission reserves."""
    r = spec["resources"]
    return {
        "gpus": r["nodes"] * r["gpus_per_node"],
        "cpus": r["nodes"] * r["tasks_per_node"] * r["cpus_per_task"],
        "memory_mb": r["nodes"] * r["memory"],
    }
