"""bench/load/run.py's paths and the machine: CPU by process category, the deployment."""

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


# -- the machine -----------------------------------------------------------------------------


CATEGORIES = [  # (category, any of these in the command line), first match wins
    ("locust (the load generator)", ["locust"]),
    ("web (uvicorn x2)", ["uvicorn"]),
    ("celery workers", ["celery -A config worker", "celery worker"]),
    ("celery beat", ["beat"]),
    ("log shippers", ["run_shipper"]),
    ("kube_watch", ["kube_watch"]),
    ("haproxy", ["haproxy"]),
    ("postgres", ["postgres"]),
    ("redis", ["redis-server"]),
    ("elasticsearch", ["elasticsearch", "org.elasticsearch"]),
    ("slurm", ["slurm", "mariadb", "munged"]),
    ("kubernetes (kwok)", ["kube-", "etcd", "kwok", "kueue"]),
    ("pytest (other engineers' suites)", ["pytest"]),
    ("other benchmarks", ["bench/"]),
    ("directory (slapd, nslcd)", ["slapd", "nslcd"]),
    ("s3 (minio)", ["minio"]),
    ("the sandbox's agent", ["process_api"]),
]


def cpu_by_process() -> dict[tuple[int, str], tuple[str, float]]:
    """(pid, start time) -> (category, CPU seconds so far) for every process."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            raw = stat.read_text()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        category = next(
            (name for name, needles in CATEGORIES if any(n in cmdline for n in needles)),
            "other" if cmdline else "kernel threads",
        )
        found[(int(stat.parent.name), fields[19])] = (category, cpu)
    return found


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_split(before: dict, after: dict, busy_seconds: float, wall: float, locust: float) -> dict:
    split: dict[str, float] = {"locust (the load generator)": locust}  # exited: from rusage
    for key, (category, cpu) in after.items():
        start = before.get(key, (category, 0.0))[1]
        split[category] = split.get(category, 0.0) + max(0.0, cpu - start)
    seen = sum(split.values())
    split["processes that came and went (tests, jobs, ...)"] = max(0.0, busy_seconds - seen)
    return {
        "busy_cpu_seconds": round(busy_seconds, 1),
        "cores_busy_on_average": round(busy_seconds / wall, 2),
        "by_category_cpu_seconds": {
            k: round(v, 1) for k, v in sorted(split.items(), key=lambda kv: -kv[1]) if v >= 0.1
        },
    }


def deployment() -> dict:
    """What scripts/portal reports: how many web servers, workers, ... are up."""
    out = subprocess.run(  # noqa: S603
        [str(ROOT / "scripts" / "portal"), "status"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    ).stdout
    up = [
        line.split()[0]
        for line in out.splitlines()
        if len(line.split()) > 1 and line.split()[1] == "up"
    ]
    webs = sorted(n for n in up if n.startswith("web"))
    return {
        "up": up,
        "web_servers": len(webs),
        "workers": sum(n.startswith("worker") for n in up),
        "proxy": "proxy" in up,
        "scale": len(webs) if "proxy" in up else 1,
    }
