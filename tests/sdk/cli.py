"""The `torus` command run against a live portal: with stdin a pipe (as in a script), or on a
pseudo-terminal that types an answer once a prompt shows."""

import fcntl
import os
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli_env(*, url: str, token: str) -> dict:
    """The variables that point the command at a portal as a token's holder."""
    return {"TORUS_URL": url, "TORUS_TOKEN": token}


def _env(env: dict | None) -> dict:
    return {**os.environ, "TORUS_CONFIG": "/nonexistent", **(env or {})}


def run_cli(
    *args: str, env: dict | None = None, stdin: str | None = None, timeout: int = 60
) -> subprocess.CompletedProcess:
    """`torus *args` with stdin a pipe, no saved profile, and `env` over this process's."""
    return subprocess.run(
        [sys.executable, "-m", "torus", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        env=_env(env),
    )


def run_cli_on_a_terminal(*args: str, env: dict, typed: str, prompt: bytes) -> tuple[int, str]:
    """The command with a pseudo-terminal as its controlling terminal and stdin/stdout/stderr;
    `typed` is typed once `prompt` shows. Returns the exit status and all the terminal showed."""
    primary, secondary = os.openpty()

    def controlling_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [sys.executable, "-m", "torus", *args],
        cwd=ROOT,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        preexec_fn=controlling_terminal,
        env=_env(env),
    )
    os.close(secondary)
    shown, sent = b"", False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO: the command has closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        if not sent and prompt in shown:
            os.write(primary, typed.encode() + b"\r")
            sent = True
    os.close(primary)
    return proc.wait(timeout=30), shown.decode(errors="replace")
