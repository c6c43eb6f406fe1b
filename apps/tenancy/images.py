"""Container images: which registry an image reference names, and whether a tenant may use it
(Tenant.image_registries; empty: only the cluster's default image)."""

import re

# The reference grammar of the distribution spec, strictly: [host[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?"  # noqa: E501
REFERENCE_RE = re.compile(
    rf"^(?:(?P<host>{_HOST})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+:[a-f0-9]{32,}))?$"
)
ENTRY_RE = re.compile(rf"^{_HOST}(?:/{_COMPONENT})*$")
DOCKER_HUB = "docker.io"


def image_repository(image: str) -> str | None:
    """'pytorch/pytorch:2.4' -> 'docker.io/pytorch/pytorch'; 'reg.example.com:5000/t/x@sha256:..'
    -> 'reg.example.com:5000/t/x'; None for what is not an image reference."""
    if len(image) > 255:
        return None
    match = REFERENCE_RE.match(image)
    if not match:
        return None
    host, path = match.group("host"), match.group("path")
    # a first part with no '.' or ':' (and not localhost) is a Docker Hub path, as docker reads it
    if host and ("." in host or ":" in host or host == "localhost"):
        host = host.lower()
        if host in (DOCKER_HUB, "index.docker.io", "registry-1.docker.io"):
            host, path = DOCKER_HUB, path if "/" in path else f"library/{path}"
        return f"{host}/{path}"
    path = f"{host}/{path}" if host else f"library/{path}"
    return f"{DOCKER_HUB}/{path}"


def registry_entry_problem(entry: str) -> str:
    """'' when `entry` is a registry host with an optional path prefix, else why not."""
    if not isinstance(entry, str) or not ENTRY_RE.match(entry) or len(entry) > 255:
        return "A registry host, optionally with a path: 'registry.example.com/team'."
    return ""


def image_problem(*, image: str, registries: list[str], default_image: str = "") -> str:
    """'' when a tenant with these registries may run `image`, else the reason."""
    repository = image_repository(image)
    if repository is None:
        return "Not a valid image reference ([registry/]path[:tag][@digest], lowercase path)."
    if default_image and image == default_image:
        return ""
    for entry in registries:
        entry = entry.lower().rstrip("/")
        if repository == entry or repository.startswith(entry + "/"):
            return ""
    if not registries:
        return "This tenant may run only the cluster's default image (no registries allowed)."
    return (
        f"The registry of {repository!r} is not among this tenant's allowed registries: "
        f"{', '.join(sorted(registries))}."
    )
