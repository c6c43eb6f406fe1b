"""bench/scheduling.py's record of how busy the machine was during a phase (issue 39: the
figures moved with the load): the 1-minute load average sampled every few seconds and the
cores each part of the machine used (bench/_common.py cpu_parts)."""

import os
import statistics
import threading
import time

from _common import cpu_parts, proc_stats

SAMPLE_S = 5.0
TOP = 6  # the busiest process names reported
PARTS = {  # process-name prefixes (/proc/PID/stat's comm, 15 characters at most)
    "slurm": ("slurmctld", "slurmd", "slurmstepd", "slurmrestd", "slurmdbd", "mariadbd"),
    "kubernetes": ("kube-", "etcd", "kwok"),
    "postgres": ("postgres",),
    "elasticsearch": ("java",),
    "redis": ("redis-server",),
}


class MachineLoad:
    """start() ... stop() -> {"loadavg_1m": {mean, max}, "cores": {part: cores used},
    "busiest": {process name: cores used}}."""

    def __init__(self, roots: dict | None = None):
        self.roots = roots or {}  # name: pid of the phase's own processes (web, worker)
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "MachineLoad":
        self._t0, self._cpu0 = time.monotonic(), cpu_parts(self.roots, PARTS)
        self._comm0 = by_comm()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._samples.append(os.getloadavg()[0])

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(SAMPLE_S + 1)
        cpu1, wall = cpu_parts(self.roots, PARTS), max(time.monotonic() - self._t0, 1e-9)
        comm1 = by_comm()
        used = {k: (v - self._comm0.get(k, 0.0)) / wall for k, v in comm1.items()}
        busiest = sorted(used.items(), key=lambda kv: -kv[1])[:TOP]
        cores = {k: round((cpu1[k] - self._cpu0[k]) / wall, 2) for k in cpu1}
        named = sum(v for k, v in cores.items() if k != "machine")
        cores["other"] = round(max(cores["machine"] - named, 0.0), 2)
        samples = self._samples or [os.getloadavg()[0]]
        return {
            "loadavg_1m": {"mean": round(statistics.fmean(samples), 2), "max": max(samples)},
            "cores": cores,
            "busiest": {k: round(v, 2) for k, v in busiest},
        }


def by_comm() -> dict:
    """CPU seconds so far of the live processes, summed by process name (a process that ended
    meanwhile counts in its parent's, if the parent reaped it)."""
    out: dict = {}
    for name, _, ticks in proc_stats().values():
        out[name] = out.get(name, 0.0) + ticks
    return {k: v / os.sysconf("SC_CLK_TCK") for k, v in out.items()}
