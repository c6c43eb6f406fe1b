"""bench/scheduling.py's constants and the emulated Slurm cluster (slurm-bench) it runs on."""

import contextlib
import json
import re
import subprocess
import threading
import time
from pathlib import Path

from _common import ENV, ROOT, VAR
from _common import log as _log
from _scheduling_trace import TENANTS

from apps.compute.envfile import read_env_file

COMPONENT = ROOT / "platform" / "services" / "components" / "slurm-bench"
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "itp-trace" / "raw-traces.tar.gz"
CLUSTER_NAME = "bench-sched"  # the Cluster row Torus dispatches to
PARTITION = "trace"  # the benchmark cluster's partition (jobs name the cluster too)
PROJECT = "trace"
PHASES = ("fifo", "backfill", "fairshare", "torus", "torus-borrow")
# <phase>-nonice: that Torus phase with Cluster.config size_nice 0, i.e. what Slurm is given
# waits in its queue in submission order (the platform before its size order reached Slurm)
# torus-lend: the quota in Slurm's GrpTRES with the idle GPUs lent through it (quota_borrowing)
# <phase>-noreserve: that phase on Slurm's backfill without reservations (bf_min_prio_reserve)
EXTRA_PHASES = (
    "torus-limits", "torus-lend", "torus-borrow-nonice", "torus-limits-nonice",
    "backfill-noreserve", "torus-lend-noreserve",
)  # fmt: skip
SLURM_MODE = {"fifo": "fifo", "backfill": "backfill", "fairshare": "fairshare"}  # else backfill
STOP = threading.Event()


def slurm_mode(phase: str) -> str:
    """The slurm-bench scheduler mode a phase runs under."""
    if phase.endswith("-noreserve"):
        return "backfill-noreserve"
    return SLURM_MODE.get(phase, "backfill")


def log(msg: str) -> None:
    _log("scheduling", msg)


# -- the benchmark cluster ------------------------------------------------------------------


class BenchSlurm:
    def __init__(self, nodes: int, gpus: int):
        self.nodes, self.gpus = nodes, gpus
        self.env = {
            **ENV,
            "TORUS_SLURM_BENCH_NODES": str(nodes),
            "TORUS_SLURM_BENCH_GPUS": str(gpus),
        }
        self.env.pop("SLURM_JWT", None)

    def component(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(  # noqa: S603
            [str(COMPONENT), *args], env=self.env, capture_output=True, text=True, check=False
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"slurm-bench {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout + result.stderr

    def up(self) -> None:
        log(f"starting the benchmark Slurm: {self.nodes} nodes x {self.gpus} GPUs")
        up = ROOT / "platform" / "services" / "up"
        subprocess.run([str(up), "slurm-bench"], env=self.env, check=True)  # noqa: S603
        self.conf = read_env_file(VAR / "slurm-bench" / "env")
        self.env["SLURM_CONF"] = self.conf["SLURM_CONF"]

    def run(self, argv: list[str], check: bool = True, stdin: str | None = None) -> str:
        result = subprocess.run(  # noqa: S603
            argv, env=self.env, capture_output=True, text=True, check=False, input=stdin
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {result.stderr.strip()}")
        return result.stdout

    def mode(self, mode: str, *, clear: bool = True) -> None:
        """The scheduler for the next phase; with `clear` slurmctld starts without the job
        records of the phases before (MinJobAge keeps them an hour, and the platform's
        reconciler lists every record the controller holds at each pass)."""
        log(f"slurmctld: scheduler {mode}{', job records cleared' if clear else ''}")
        args = ("sched", mode, "clear") if clear else ("sched", mode)
        log(self.component(*args).strip().replace("\n", "; "))
        self.component("wait")

    def accounts(self, quotas: dict, *, limits: bool) -> None:
        """Accounts sched-<tenant> (fair share by the tenant's share) with root in them, for
        the phases that submit to Slurm directly; with `limits`, GrpTRES gres/gpu = quota."""
        for name, _, _, share in TENANTS:
            acct = f"slurm-{name}"
            self.run(["sacctmgr", "-i", "add", "account", acct, "parent=root"], check=False)
            self.run(["sacctmgr", "-i", "add", "user", "root", f"account={acct}"], check=False)
            grp = f"gres/gpu={quotas[name]}" if limits else "gres/gpu=-1"
            self.run(
                ["sacctmgr", "-i", "modify", "account", acct, "set", f"fairshare={share}",
                 f"GrpTRES={grp}"],
                check=False,
            )  # fmt: skip

    def squeue_json(self) -> list[dict]:
        out = self.run(["squeue", "--json"], check=False)
        try:
            return json.loads(out).get("jobs", [])
        except ValueError:
            return []

    def active_names(self) -> set[str]:
        out = self.run(["squeue", "-h", "-t", "PD,R,CG,CF", "-o", "%j"], check=False)
        return set(out.split())

    def cancel_prefix(self, prefix: str) -> None:
        ids = [
            str(j["job_id"])
            for j in self.squeue_json()
            if str(j.get("name", "")).startswith(prefix)
            and j.get("job_state") in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
        ]
        for k in range(0, len(ids), 200):
            self.run(["scancel", *ids[k : k + 200]], check=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            n.startswith(prefix) for n in self.active_names()
        ):
            time.sleep(0.5)

    def stop(self) -> None:
        log("stopping the benchmark Slurm (its own daemons only)")
        self.component("stop", check=False)


def machine(slurm: BenchSlurm) -> dict:
    """What the emulated cluster costs this machine: slurmd count and memory."""
    rss, count = 0, 0
    marker = str(VAR / "slurm-bench" / "etc" / "slurm.conf")
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (p / "comm").read_text().strip() != "slurmd":
                continue
            if marker not in (p / "cmdline").read_text():
                continue
            status = (p / "status").read_text()
            rss += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
            count += 1
    return {"slurmd_processes": count, "slurmd_rss_mib": round(rss / 1024, 1)}
