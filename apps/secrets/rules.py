"""What a secret's name and value may be (the API, the spec and the dispatcher share these)."""

import re
from collections.abc import Callable

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 128
MAX_VALUE_BYTES = 64 * 1024
# Whether the platform sets a variable itself (jobs' reserved names and prefixes), registered
# by jobs from its AppConfig.ready(): secrets never import jobs.
_RESERVED: list[Callable[[str], bool]] = []


def reserved_register(reserved: Callable[[str], bool]) -> None:
    """Register the test of a variable name the platform sets in every job."""
    _RESERVED[:] = [reserved]


def name_problem(name) -> str:
    """'' when `name` may name a secret: a variable name the platform does not set itself."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return "A letter or '_', then letters, digits or '_' (a variable name)."
    if len(name) > MAX_NAME:
        return f"At most {MAX_NAME} characters."
    (reserved,) = _RESERVED  # registered by jobs (apps/jobs/apps.py)
    if reserved(name):
        return "Set by the platform; choose another name."
    return ""


def value_problem(value) -> str:
    if not isinstance(value, str):
        return "A string."
    if not value:
        return "Must not be empty."
    if "\x00" in value:
        return "Must not contain NUL characters."
    if len(value.encode("utf-8", errors="surrogatepass")) > MAX_VALUE_BYTES:
        return f"At most {MAX_VALUE_BYTES // 1024} KiB (bytes of UTF-8)."
    return ""
