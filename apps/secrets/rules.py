"""What a secret's name and value may be (the API, the spec and the dispatcher share these)."""

import re

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 128
MAX_VALUE_BYTES = 64 * 1024


def name_problem(name) -> str:
    """'' when `name` may name a secret: a variable name the platform does not set itself."""
    from apps.jobs.spec import RESERVED_ENV, RESERVED_ENV_PREFIXES  # (jobs reads secrets lazily)

    if not isinstance(name, str) or not NAME_RE.match(name):
        return "A letter or '_', then letters, digits or '_' (a variable name)."
    if len(name) > MAX_NAME:
        return f"At most {MAX_NAME} characters."
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
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
