"""Training metrics reported as output lines: `torus-metric step=<int> <name>=<float> ...`.

The SDK's torus.log_metrics() prints exactly this line; any program may print it too.
"""

import math
import re

METRIC_PREFIX = "torus-metric "
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")


def parse_metric_line(text: str) -> tuple[int, dict[str, float]] | None:
    """(step, {name: value}) from a metric line, or None if the line is not a valid one."""
    if not text.startswith(METRIC_PREFIX):
        return None
    pairs = {}
    for item in text[len(METRIC_PREFIX) :].split():
        key, sep, raw = item.partition("=")
        if not sep or not NAME.match(key):
            return None
        pairs[key] = raw
    try:
        step = int(pairs.pop("step"))
        values = {key: float(raw) for key, raw in pairs.items()}
    except (KeyError, ValueError):
        return None
    values = {key: value for key, value in values.items() if math.isfinite(value)}
    return (step, values) if values else None
