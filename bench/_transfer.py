"""What the transfer benchmarks (datasets_transfer.py, s3_transfer.py) share: a random source
file with its sha256, streamed pieces, the web process's memory, and the command line."""

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import _common as common

from scripts import devstack

PIECE = 1024 * 1024


def pieces(path: Path):
    with path.open("rb") as handle:
        while chunk := handle.read(PIECE):
            yield chunk


def rss_kib(pid: int, field: str) -> int:
    """VmRSS / VmHWM of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def make_source(path: Path, size: int) -> str:
    """A file of `size` random bytes; its sha256."""
    digest = hashlib.sha256()
    with path.open("wb") as handle:
        left = size
        while left:
            chunk = os.urandom(min(left, 16 * PIECE))
            digest.update(chunk)
            handle.write(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def main(name: str, doc: str, run: Callable, *, size_mb: int, quick_mb: int) -> int:
    """Parse --size-mb/--runs/--quick/--keep-logs, run as root, stop what the run started,
    print the result line (the bench/README.md contract)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=size_mb, help="file size (MiB)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help=f"{quick_mb} MiB, 2 runs")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.runs = quick_mb, 2
    if os.geteuid() != 0:
        sys.exit("run as root (the bench project's tree is made as the worker makes it)")
    logdir = Path(common.VAR) / "log" / f"bench-{name}-{int(time.time())}"
    logdir.mkdir(parents=True, exist_ok=True)
    result = None
    try:
        result = run(args, logdir)
    finally:
        devstack.stop_all()
    return common.finish(name, result, logdir=logdir, keep_logs=args.keep_logs)
