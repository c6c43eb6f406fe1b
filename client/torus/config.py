"""Where the SDK and CLI find the portal's URL and a token.

Order: explicit arguments, then TORUS_URL / TORUS_TOKEN, then the config file (TORUS_CONFIG,
default ~/.config/torus/config.toml). The file holds one profile per platform, and which one
is the default; `torus login` writes it:

    default = "lab"

    [profiles.lab]
    url = "https://torus.lab.example"
    token = "tor_..."

A profile is chosen by --profile, then TORUS_PROFILE, then `default`. A file with top-level
`url` and `token` (the older layout) is read as the profile "default".
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9 and 3.10
    import tomli as tomllib

from torus.errors import TorusError

DEFAULT_URL = "http://127.0.0.1:8000"
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None
    profile: str | None = None


def config_path() -> Path:
    return Path(os.environ.get("TORUS_CONFIG", Path.home() / ".config" / "torus" / "config.toml"))


def read_config() -> dict:
    """The config file as {"default": name or None, "profiles": {name: {url, token}}}."""
    path = config_path()
    if not path.is_file():
        return {"default": None, "profiles": {}}
    try:
        raw = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
        raise TorusError(f"cannot read {path}: {exc}") from exc
    profiles = {
        str(name): {k: str(v) for k, v in values.items() if k in ("url", "token")}
        for name, values in (raw.get("profiles") or {}).items()
        if isinstance(values, dict)
    }
    if "url" in raw or "token" in raw:  # the older single-platform layout
        profiles.setdefault("default", {k: str(raw[k]) for k in ("url", "token") if k in raw})
    default = raw.get("default")
    if default is None and len(profiles) == 1:
        default = next(iter(profiles))
    return {"default": default, "profiles": profiles}


def write_config(config: dict) -> Path:
    """Write the profiles back, readable by the owner only (it holds tokens)."""
    path = config_path()
    lines = []
    if config.get("default"):
        lines += [f"default = {_quote(config['default'])}", ""]
    for name, values in sorted(config["profiles"].items()):
        lines.append(f"[profiles.{_quote(name)}]")
        lines += [f"{key} = {_quote(values[key])}" for key in ("url", "token") if values.get(key)]
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)  # whole or not at all
    return path


def _quote(value: str) -> str:
    """A TOML basic string (JSON's escapes are a subset of TOML's)."""
    return json.dumps(str(value))


def check_profile_name(name: str) -> str:
    if not PROFILE_NAME.match(name):
        raise TorusError(
            f"profile name {name!r}: letters, digits, '.', '_' and '-', up to 63 characters"
        )
    return name


def load_settings(
    *, url: str | None = None, token: str | None = None, profile: str | None = None
) -> Settings:
    config = read_config()
    chosen = profile or os.environ.get("TORUS_PROFILE") or config["default"]
    values: dict = {}
    if chosen:
        values = config["profiles"].get(chosen) or {}
        if not values and (profile or os.environ.get("TORUS_PROFILE")):
            known = ", ".join(sorted(config["profiles"])) or "none yet"
            raise TorusError(
                f"no profile {chosen!r} in {config_path()} (profiles: {known}); "
                f"`torus login --profile {chosen}` makes it"
            )
    url = url or os.environ.get("TORUS_URL") or values.get("url") or DEFAULT_URL
    token = token or os.environ.get("TORUS_TOKEN") or values.get("token")
    return Settings(url=str(url).rstrip("/"), token=token, profile=chosen)
