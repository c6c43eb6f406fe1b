"""Reading the sourceable `export KEY=value` files that platform/services writes (no Django)."""

import shlex
from pathlib import Path


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            values[key] = " ".join(shlex.split(value))
    return values
