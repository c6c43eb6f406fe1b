"""Path rules for datasets: a file's path inside a version, and a directory to register.

Everything a client names is checked here before it reaches storage: a file path is relative,
'/'-separated, without '.', '..' or empty parts, backslashes, control characters or a URI
scheme, also once percent-decoded (a client that encodes twice must not smuggle '..' through);
a directory to register is an absolute path inside the dataset's project tree that resolves
(symlinks followed) inside it too.
"""

import os
import re
from pathlib import Path
from urllib.parse import unquote

from apps.datasets.storage.base import key_problem
from apps.identity.storage import project_root

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
MAX_PATH = 1024


def _uri_problem(value: str) -> str | None:
    if _SCHEME.match(value) or "://" in value:
        return "URIs are not accepted; give a path."
    return None


def file_path_problem(path) -> str | None:
    """Why `path` cannot name a file in a dataset version, or None."""
    if not isinstance(path, str) or not path:
        return "A file path is required."
    if len(path) > MAX_PATH:
        return f"Must be at most {MAX_PATH} characters."
    for candidate in dict.fromkeys((path, unquote(path), unquote(unquote(path)))):
        problem = _uri_problem(candidate) or key_problem(candidate)
        if problem:
            if candidate.startswith("/"):
                return "Must be a relative path."
            return problem
    if any(len(part.encode()) > 255 for part in path.split("/")):
        return "Each part must be at most 255 bytes."
    return None


def source_dir_problem(path, *, project) -> str | None:
    """Why `path` cannot be registered as a version of a dataset of `project`, or None."""
    if not isinstance(path, str) or not path:
        return "A directory path is required."
    for candidate in dict.fromkeys((path, unquote(path), unquote(unquote(path)))):
        problem = _uri_problem(candidate)
        if problem:
            return problem
        if "\\" in candidate or "\x00" in candidate:
            return "Must not contain backslashes or NUL."
        if any(part in (".", "..") for part in candidate.split("/")):
            return "Must not contain '.' or '..' parts."
    if not path.startswith("/"):
        return "Must be an absolute path."
    root = project_root(project)
    candidate = Path(path)
    if candidate != root and root not in candidate.parents:
        return f"Must lie in the project's tree ({root})."
    real, real_root = Path(os.path.realpath(candidate)), Path(os.path.realpath(root))
    if real != real_root and real_root not in real.parents:
        return f"Resolves (through a symlink) outside {root}."
    if not real.is_dir():
        return "Not a directory (or not readable by the platform)."
    return None


def inside(path: Path, root: Path) -> bool:
    real, real_root = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return real == real_root or real_root in real.parents
