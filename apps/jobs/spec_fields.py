"""The job spec's values: patterns, bounds, the names a job may not set, the keys refused as
privileges, and the fields that parse sizes, durations, commands and env values.

Values that are passed on (argv, environment, paths) travel as data, never as script text.
"""

import re

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.compute.backends import reserved_env_prefixes, reserved_label_domains
from apps.core.api.serializers import StrictSerializer

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
LABEL_KEY_RE = re.compile(r"^[a-z0-9](?:[a-z0-9._/-]{0,61}[a-z0-9])?$")  # the list filter's
# The label syntax of the objects a backend may label: [prefix/]name, where prefix is a DNS
# subdomain and name and value 63 characters, alphanumeric at both ends.
LABEL_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$")  # lowercase, stricter
LABEL_PREFIX_RE = re.compile(
    r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$"
)
LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")
# label prefixes (by their ending) the platform and the backends own: torus.io/tenant, and
# each backend's (Backend.reserved_label_domains)
RESERVED_LABEL_DOMAINS = ("torus.io", *reserved_label_domains())
TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
MEMORY_RE = re.compile(r"^(\d+)\s*([KMGT]?)i?B?$", re.IGNORECASE)
DATASET_AS_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")
TIME_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ALIAS_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")

# Set by the platform for every process; a job may not override them.
RESERVED_ENV = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "LOCAL_RANK"}
# The platform's own prefix, and those the backends' commands read or set in a job
# (Backend.reserved_env_prefixes).
RESERVED_ENV_PREFIXES = ("TORUS_", *reserved_env_prefixes())
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


def no_control(value: str, *, allow_newlines: bool = False) -> str:
    if "\x00" in value:
        raise serializers.ValidationError("Must not contain NUL characters.")
    if not allow_newlines and ("\n" in value or "\r" in value):
        raise serializers.ValidationError("Must not contain newlines.")
    return value


def absolute_path(value: str) -> str:
    no_control(value)
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
            no_control(data, allow_newlines=True)
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
                no_control(item, allow_newlines=True)
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


def label_key_problem(key: str) -> str:
    """'' when `key` is a label key a job may set: [prefix/]name in the syntax of the labels
    a backend may put on its objects, with no prefix of the platform's or a backend's own."""
    prefix, _, name = key.rpartition("/")
    if not LABEL_NAME_RE.match(name) or (prefix and not LABEL_PREFIX_RE.match(prefix)):
        return (
            "Keys: [prefix/]name, the name up to 63 lowercase letters, digits, '.', '_' or"
            " '-' starting and ending with a letter or digit, the prefix a lowercase DNS name."
        )
    if len(prefix) > 253:
        return "A key's prefix is at most 253 characters."
    if prefix and prefix.endswith(RESERVED_LABEL_DOMAINS):
        return f"The prefix {prefix!r} is the platform's; choose another."
    return ""
