"""Validation at the manifest boundary: every name, label, annotation, environment entry and
image that goes into a Kubernetes object is checked here, and refused (InvalidValue, naming
the field and the reason) when it does not fit. Manifests are dicts serialised as JSON by the
client, so a value can never become YAML or JSON structure; these checks keep values inside
the grammar the apiserver accepts, so nothing is half-created."""

import hashlib
import ipaddress
import re

from apps.compute.backends.base import SubmitRejected

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# registry[:port]/path[:tag][@digest], lowercase path components as the distribution spec says
IMAGE = re.compile(
    r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9.]*[A-Za-z0-9])?(?::[0-9]{1,5})?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
MAX_ENV_VALUE = 128 * 1024
MAX_ANNOTATION_BYTES = 256 * 1024


class InvalidValue(SubmitRejected):
    """A value that does not fit where it would go; `field` names where."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def dns_label(value: str, *, field: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not DNS_LABEL.fullmatch(value):
        raise InvalidValue(field, f"{value!r} is not a DNS-1123 label (a-z, 0-9, '-', <= 63)")
    return value


def dns_subdomain(value: str, *, field: str) -> str:
    if not isinstance(value, str) or len(value) > 253 or not DNS_SUBDOMAIN.fullmatch(value):
        raise InvalidValue(field, f"{value!r} is not a DNS-1123 subdomain")
    return value


def bounded_label(*parts: str, field: str) -> str:
    """'-'.join(parts) as a DNS label; a name too long keeps a hash of the whole as its end,
    so two long names never collide. Each part must be a DNS label already."""
    for part in parts:
        dns_label(part, field=field)
    name = "-".join(parts)
    if len(name) > 63:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        name = f"{name[:52].rstrip('-')}-{digest}"
    return dns_label(name, field=field)


def qualified_name(value: str, *, field: str) -> str:
    """A label key or an extended resource name: [prefix/]name."""
    if not isinstance(value, str):
        raise InvalidValue(field, "must be a string")
    prefix, _, name = value.rpartition("/")
    if prefix:
        dns_subdomain(prefix, field=field)
    if len(name) > 63 or not LABEL_NAME.fullmatch(name):
        raise InvalidValue(field, f"{value!r} is not a qualified name ([prefix/]name, <= 63)")
    return value


def label_value(value: str, *, field: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or (value and not LABEL_NAME.fullmatch(value)):
        raise InvalidValue(field, f"{value!r} is not a label value (A-Z, a-z, 0-9, -_., <= 63)")
    return value


def labels(values: dict, *, field: str) -> dict[str, str]:
    for key, value in values.items():
        qualified_name(key, field=f"{field} key")
        label_value(value, field=f"{field}[{key}]")
    return dict(values)


def text(value: str, *, field: str, limit: int = MAX_ANNOTATION_BYTES) -> str:
    """Free text that travels as a JSON string (an annotation or an env value): any
    character but NUL, within a size."""
    if not isinstance(value, str):
        raise InvalidValue(field, "must be a string")
    if "\x00" in value:
        raise InvalidValue(field, "contains a NUL character")
    if len(value.encode()) > limit:
        raise InvalidValue(field, f"longer than {limit} bytes")
    return value


def environment(values: dict, *, field: str = "environment") -> list[dict[str, str]]:
    """A container's env list; names as C identifiers, values as text."""
    out = []
    for name, value in values.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name) or len(name) > 256:
            raise InvalidValue(field, f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        out.append(
            {"name": name, "value": text(value, field=f"{field}[{name}]", limit=MAX_ENV_VALUE)}
        )
    return out


def image(value: str, *, field: str = "image") -> str:
    if not isinstance(value, str) or len(value) > 512 or not IMAGE.fullmatch(value):
        raise InvalidValue(field, f"{value!r} is not an image reference")
    return value


def absolute_path(value: str, *, field: str) -> str:
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or "\x00" in value
        or any(part == ".." for part in value.split("/"))
        or len(value) > 4096
    ):
        raise InvalidValue(field, f"{value!r} is not an absolute path without '..'")
    return value


def within(path: str, root: str) -> bool:
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/")


def cidr(value: str, *, field: str) -> str:
    """An IPv4 or IPv6 network in canonical form; a bare address is its /32 (/128). Host bits
    set (10.0.0.1/24) are refused: an operator meant one of two things."""
    if not isinstance(value, str):
        raise InvalidValue(field, "must be a string")
    try:
        return str(ipaddress.ip_network(value.strip(), strict=True))
    except ValueError as exc:
        raise InvalidValue(field, f"{value!r} is not a network (address/prefix): {exc}") from exc


def cidrs(values, *, field: str) -> tuple[str, ...]:
    if not isinstance(values, (list, tuple)):
        raise InvalidValue(field, "must be a list of networks")
    return tuple(cidr(v, field=f"{field}[{i}]") for i, v in enumerate(values))


def split_id(backend_id: str) -> tuple[str, str]:
    """A backend id, '<namespace>/<job name>', as its two checked names."""
    ns, _, name = (backend_id or "").partition("/")
    return dns_label(ns, field="backend id"), dns_label(name, field="backend id")
