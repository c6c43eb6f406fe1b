"""The job spec: validation with field-by-field errors, and normalisation with defaults.

Everything a user writes is checked here, before it can reach a batch request. Values that
are passed on (argv, environment, paths) travel as data, never as script text.
"""

import re

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.serializers import BoundedDictField, StrictSerializer
from apps.identity.storage import path_problem
from apps.jobs.models import Kind
from apps.serving.fit_fields import TrainingFitSerializer

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
LABEL_KEY_RE = re.compile(r"^[a-z0-9](?:[a-z0-9._/-]{0,61}[a-z0-9])?$")  # the list filter's
# Kubernetes' label syntax (a backend may put labels on its objects): [prefix/]name, where
# prefix is a DNS subdomain and name and value 63 characters, alphanumeric at both ends.
LABEL_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$")  # lowercase, stricter
LABEL_PREFIX_RE = re.compile(
    r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$"
)
LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")
# label prefixes (by their ending) the platform and Kubernetes own: torus.io/tenant,
# kueue.x-k8s.io/queue-name, node.kubernetes.io/...
RESERVED_LABEL_DOMAINS = ("torus.io", "kubernetes.io", "k8s.io")
TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
MEMORY_RE = re.compile(r"^(\d+)\s*([KMGT]?)i?B?$", re.IGNORECASE)
DATASET_AS_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")
TIME_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ALIAS_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")

# Set by the platform for every process; a job may not override them.
RESERVED_ENV = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "LOCAL_RANK"}
# SBATCH_/SRUN_/SALLOC_ are read as options by Slurm's commands (in the job too: srun).
RESERVED_ENV_PREFIXES = ("SLURM_", "TORUS_", "SBATCH_", "SRUN_", "SALLOC_")
RETRYABLE = ("node_failure", "preemption")

# Keys that ask for more than a job gets: refused wherever they appear in a spec, with the
# reason (every other unknown key is refused as "Unknown field."). Compared lowercased,
# without '_' and '-'.
FORBIDDEN_KEYS = {
    "privileged": "Jobs never run privileged.",
    "allowprivilegeescalation": "Jobs never gain privileges.",
    "capabilities": "Jobs run with no added capabilities.",
    "securitycontext": "The platform sets the security context: the submitter's uid, the"
    " project's group, no privileges.",
    "runasuser": "A job runs as its submitter; another uid is not allowed.",
    "runasgroup": "A job runs with its project's group; another gid is not allowed.",
    "runasnonroot": "A job never runs as root; the platform sets this.",
    "uid": "A job runs as its submitter; another uid is not allowed.",
    "gid": "A job runs with its project's group; another gid is not allowed.",
    "user": "A job runs as its submitter; another user is not allowed.",
    "group": "A job runs with its project's group; another group is not allowed.",
    "hostpath": "Host paths are not mounted; read data through datasets or the project's tree.",
    "hostpaths": "Host paths are not mounted; read data through datasets or the project's tree.",
    "volumes": "Host paths are not mounted; read data through datasets or the project's tree.",
    "volumemounts": "Host paths are not mounted; read data through datasets or the project's tree.",
    "mounts": "Host paths are not mounted; read data through datasets or the project's tree.",
    "hostnetwork": "Jobs do not share the host's network.",
    "hostpid": "Jobs do not share the host's processes.",
    "hostipc": "Jobs do not share the host's IPC namespace.",
    "hostport": "Jobs do not bind host ports.",
}


def forbidden_keys(data) -> dict:
    """{key: [reason]} for the keys of `data` that ask for privileges (see FORBIDDEN_KEYS)."""
    if not isinstance(data, dict):
        return {}
    found = {}
    for key in data:
        reason = FORBIDDEN_KEYS.get(str(key).lower().replace("_", "").replace("-", ""))
        if reason:
            found[key] = [reason]
    return found


# A spec section: unknown keys refused, those asking for privileges with their reason.
# (A comment, not a docstring: the API schema would show it on every section.)
class ClosedSerializer(StrictSerializer):
    def to_internal_value(self, data):
        found = forbidden_keys(data)
        if found:
            raise serializers.ValidationError(found)
        return super().to_internal_value(data)


MAX_ARG = 32 * 1024
MAX_SCRIPT = 256 * 1024
MAX_ARGS = 1000
MAX_MEMORY_MB = 16 * 1024 * 1024  # 16 TiB
MAX_MINUTES = 366 * 1440
MAX_SIZE_TEXT = 32  # '16T', '02:00:00', '365-23:59:59'
MAX_PATH = 1024


def _no_control(value: str, *, allow_newlines: bool = False) -> str:
    if "\x00" in value:
        raise serializers.ValidationError("Must not contain NUL characters.")
    if not allow_newlines and ("\n" in value or "\r" in value):
        raise serializers.ValidationError("Must not contain newlines.")
    return value


def _absolute_path(value: str) -> str:
    _no_control(value)
    if not value.startswith("/"):
        raise serializers.ValidationError("Must be an absolute path.")
    if len(value) > MAX_PATH:
        raise serializers.ValidationError(f"At most {MAX_PATH} characters.")
    return value


def parse_memory_mb(value) -> int:
    """'4G', '512M', '2T' or a number of MiB -> MiB."""
    if isinstance(value, bool):
        raise serializers.ValidationError("Give a size such as '4G' or a number of MiB.")
    if isinstance(value, int):
        mb = value
    else:
        if len(str(value)) > MAX_SIZE_TEXT:
            raise serializers.ValidationError(f"At most {MAX_SIZE_TEXT} characters.")
        match = MEMORY_RE.match(str(value).strip())
        if not match:
            raise serializers.ValidationError(
                "Give a size such as '4G', '512M' or MiB as a number."
            )
        number, unit = int(match.group(1)), match.group(2).upper()
        mb = {
            "K": number // 1024,
            "": number,
            "M": number,
            "G": number * 1024,
            "T": number * 1024 * 1024,
        }[unit]
    if not 1 <= mb <= MAX_MEMORY_MB:
        raise serializers.ValidationError("Must be between 1M and 16T.")
    return mb


def parse_minutes(value) -> int:
    """'HH:MM:SS', 'D-HH:MM:SS', 'MM:SS' or a number of minutes -> minutes (rounded up)."""
    if isinstance(value, bool):
        raise serializers.ValidationError("Give a duration such as '02:00:00' or minutes.")
    if isinstance(value, int):
        minutes = value
    else:
        if len(str(value)) > MAX_SIZE_TEXT:
            raise serializers.ValidationError(f"At most {MAX_SIZE_TEXT} characters.")
        match = TIME_RE.match(str(value).strip())
        if not match:
            raise serializers.ValidationError("Give a duration such as '02:00:00' or minutes.")
        days, hours, mins, secs = (int(g) if g else 0 for g in match.groups())
        if match.group(2) is None:  # MM:SS
            hours, mins, secs = 0, int(match.group(3)), int(match.group(4))
        minutes = days * 1440 + hours * 60 + mins + (1 if secs else 0)
    if not 1 <= minutes <= MAX_MINUTES:
        raise serializers.ValidationError("Must be between 1 minute and 366 days.")
    return minutes


class FlexibleField(serializers.Field):
    """A field whose value is parsed by a function (memory sizes, durations)."""

    def __init__(self, parse, **kwargs):
        self.parse = parse
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        return self.parse(data)

    def to_representation(self, value):
        return value


# a FlexibleField's schema, by its parser: the text's length and the number's range
FLEXIBLE_SCHEMAS = {
    parse_memory_mb: {"type": "integer", "minimum": 1, "maximum": MAX_MEMORY_MB},
    parse_minutes: {"type": "integer", "minimum": 1, "maximum": MAX_MINUTES},
}


class FlexibleFieldSchema(OpenApiSerializerFieldExtension):
    target_class = FlexibleField
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        number = FLEXIBLE_SCHEMAS.get(self.target.parse, {"type": "integer"})
        return {"oneOf": [{"type": "string", "maxLength": MAX_SIZE_TEXT}, number]}


@extend_schema_field(
    {
        "oneOf": [
            {
                "type": "array",
                "items": {"type": "string", "maxLength": MAX_ARG},
                "minItems": 1,
                "maxItems": MAX_ARGS,
            },
            {"type": "string", "maxLength": MAX_SCRIPT},
        ]
    }
)
class CommandField(serializers.Field):
    """An argv list, or a script body (a string run by bash)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            _no_control(data, allow_newlines=True)
            if not data.strip():
                raise serializers.ValidationError("The script is empty.")
            if len(data) > MAX_SCRIPT:
                raise serializers.ValidationError("A script may be at most 256 KiB.")
            return {"script": data}
        if isinstance(data, list):
            if not data:
                raise serializers.ValidationError("Give at least the program to run.")
            if len(data) > MAX_ARGS:
                raise serializers.ValidationError(f"At most {MAX_ARGS} arguments.")
            for item in data:
                if not isinstance(item, str):
                    raise serializers.ValidationError("Every argument must be a string.")
                _no_control(item, allow_newlines=True)
                if len(item) > MAX_ARG:
                    raise serializers.ValidationError("An argument may be at most 32 KiB.")
            if not data[0]:
                raise serializers.ValidationError("The program name is empty.")
            return {"argv": list(data)}
        raise serializers.ValidationError("Give a list of arguments or a script as a string.")

    def to_representation(self, value):
        return value.get("argv", value.get("script"))


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "maxLength": MAX_ARG},
            {
                "type": "object",
                "properties": {"secret": {"type": "string", "maxLength": 128}},
                "required": ["secret"],
                "additionalProperties": False,
            },
        ]
    }
)
class EnvValueField(serializers.Field):
    """An env value: text (stored and shown as given: not secret), or {"secret": NAME}, the
    value of the project's secret NAME, put in the job's environment at dispatch (the spec
    keeps only the name)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            if len(data) > MAX_ARG:
                raise serializers.ValidationError("At most 32 KiB.")
            return data
        if isinstance(data, dict) and set(data) == {"secret"}:
            name = data["secret"]
            if not isinstance(name, str) or not ENV_KEY_RE.match(name):
                raise serializers.ValidationError("{secret: NAME}: NAME is a secret's name.")
            return {"secret": name}
        raise serializers.ValidationError("A string, or {secret: NAME} for a project secret.")

    def to_representation(self, value):
        return value


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
        _no_control(value)
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
        return _absolute_path(value)

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
        from apps.jobs.datasets import version_problem

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
        return _absolute_path(value)

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
    the memory) it asks for: then the estimate's reason (apps/serving/fit.py)."""
    from apps.serving import fit
    from apps.serving.model_config import config_from_dict

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


def label_key_problem(key: str) -> str:
    """'' when `key` is a label key a job may set: [prefix/]name as Kubernetes has it, with
    no prefix of the platform's or Kubernetes' own."""
    prefix, _, name = key.rpartition("/")
    if not LABEL_NAME_RE.match(name) or (prefix and not LABEL_PREFIX_RE.match(prefix)):
        return (
            "Keys: [prefix/]name, the name up to 63 lowercase letters, digits, '.', '_' or"
            " '-' starting and ending with a letter or digit, the prefix a lowercase DNS name."
        )
    if len(prefix) > 253:
        return "A key's prefix is at most 253 characters."
    if prefix and prefix.endswith(RESERVED_LABEL_DOMAINS):  # also x-k8s.io (Kueue, kwok)
        return f"The prefix {prefix!r} is the platform's; choose another."
    return ""


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
    image; on Kubernetes, where every job runs in one, an image either way: a 400 at
    environment.image with the reason otherwise."""
    from apps.compute.models import Backend
    from apps.jobs.images import image_problem

    default_image = str((cluster.config or {}).get("default_image", ""))
    if spec["environment"]["type"] != "container":
        if cluster.backend == Backend.KUBERNETES and not default_image:
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
