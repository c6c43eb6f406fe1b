"""The checkout's own Django secret key ($TORUS_VAR_DIR/secret-key) for commands run outside make.

`make` exports TORUS_SECRET_KEY from that file (made once by the Makefile); manage.py and
scripts/portal read the same file themselves when the environment sets none, so the README's
commands work in a fresh shell. `python -m config.secret_key` prints it (scripts/portal).
"""

import os
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def secret_key_path() -> Path:
    """$TORUS_VAR_DIR/secret-key, TORUS_VAR_DIR defaulting to the checkout's .var/."""
    return Path(os.environ.get("TORUS_VAR_DIR") or BASE_DIR / ".var") / "secret-key"


def checkout_secret_key() -> str | None:
    """TORUS_SECRET_KEY from the environment, else the checkout's file; None when neither
    (no file yet, or not readable by this user): settings then names the missing variable."""
    if os.environ.get("TORUS_SECRET_KEY"):
        return os.environ["TORUS_SECRET_KEY"]
    try:
        return secret_key_path().read_text().strip() or None
    except OSError:
        return None


def use_checkout_secret_key() -> None:
    """Export the checkout's key into this process's environment when it has none."""
    key = checkout_secret_key()
    if key:
        os.environ["TORUS_SECRET_KEY"] = key


if __name__ == "__main__":
    key = checkout_secret_key()
    if not key:
        sys.exit(f"torus: no {secret_key_path()} (or not readable); run make up")
    print(key)
