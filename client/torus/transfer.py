"""What uploads and downloads share: a progress bar and a safe, streaming tar extraction."""

from __future__ import annotations

import sys
import tarfile
import time
from pathlib import Path

from torus.errors import TorusError

READ_BYTES = 1024 * 1024


class Progress:
    """A one-line progress bar on stderr (on a terminal, unless disabled)."""

    def __init__(self, label: str, total: int | None, *, enabled: bool | None = None):
        self.label, self.total, self.done = label, total, 0
        self.started = time.monotonic()
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def advance(self, n: int) -> None:
        self.update(self.done + n)

    def update(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        if not self.enabled:
            return
        rate = done / max(time.monotonic() - self.started, 1e-6) / 1e6
        if self.total:
            filled = int(30 * min(done, self.total) / self.total)
            bar = "#" * filled + "-" * (30 - filled)
            text = f"\r{self.label} [{bar}] {100 * done / self.total:5.1f}% {rate:8.1f} MB/s"
        else:
            text = f"\r{self.label} {done / 1e6:10.1f} MB {rate:8.1f} MB/s"
        print(text, end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.enabled:
            print(file=sys.stderr, flush=True)


def extract(tar: tarfile.TarFile, out: Path) -> None:
    """Write the archive's regular files and directories under `out`, streaming; any other
    member, or a name that would land outside `out`, is refused."""
    root = out.resolve()
    for member in tar:
        parts = member.name.rstrip("/").split("/") if member.isdir() else member.name.split("/")
        if member.name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise TorusError(f"refusing the archive member {member.name!r}")
        if not (member.isfile() or member.isdir()):
            raise TorusError(f"refusing the archive member {member.name!r} (not a file)")
        target = root.joinpath(*parts)
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        with target.open("wb") as handle:
            while chunk := source.read(READ_BYTES):
                handle.write(chunk)
