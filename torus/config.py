"""Where the SDK and CLI find the portal's URL and a token.

Order: explicit arguments, then TORUS_URL / TORUS_TOKEN, then the config file
(TORUS_CONFIG, default ~/.config/torus/config.toml) with `url = "..."` and `token = "..."`.
"""

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from torus.errors import TorusError

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None


def config_path() -> Path:
    return Path(os.environ.get("TORUS_CONFIG", Path.home() / ".config" / "torus" / "config.toml"))


def load_settings(*, url: str | None = None, token: str | None = None) -> Settings:
    file_values: dict = {}
    path = config_path()
    if path.is_file():
        try:
            file_values = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise TorusError(f"cannot read {path}: {exc}") from exc
    url = url or os.environ.get("TORUS_URL") or file_values.get("url") or DEFAULT_URL
    token = token or os.environ.get("TORUS_TOKEN") or file_values.get("token")
    return Settings(url=str(url).rstrip("/"), token=token)
