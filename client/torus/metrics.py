"""Reporting training metrics from inside a job: one line the shipper recognises."""

from __future__ import annotations

import math
import re
import sys

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")


def log_metrics(*, step: int, file=None, **values: float) -> None:
    """Print `torus-metric step=<step> name=value ...` (flushed). Torus stores it as a time
    series: GET /api/v1/jobs/{id}/metrics/, `torus metrics ID`, and the live websocket."""
    parts = [f"step={int(step)}"]
    for name, value in values.items():
        if not NAME.match(name):
            raise ValueError(f"metric name {name!r}: letters, digits, _ . / - only")
        number = float(value)
        if not math.isfinite(number):
            continue
        parts.append(f"{name}={number!r}")
    print("torus-metric " + " ".join(parts), file=file or sys.stdout, flush=True)
