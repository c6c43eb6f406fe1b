"""Scheduling quality on the real ITP trace: Torus's admission in front of Slurm, beside
Slurm alone (FIFO + backfill, multifactor fair share) and plain FIFO, on one big emulated
Slurm cluster (platform/services/components/slurm-bench). See bench/README.md.

Every phase replays the same jobs (same arrival times, GPUs, durations) on the same cluster,
one phase after the other; the last stdout line is the JSON result, and a PNG (allocation
over time, completion-time distributions) is written beside it.
"""

import argparse
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TORUS_REDIS_DB_BASE", "13")  # its own broker/cache DBs (13-15)

from _common import ENV, ROOT, VAR, django_setup, environment, finish
from _common import log as _log
from _scheduling_trace import (
    TENANTS,
    allocation_bound,
    allocation_series,
    busiest_window,
    phase_metrics,
    read_trace,
    reference_schedule,
    replay_plan,
)

from apps.compute.envfile import read_env_file
from scripts.devstack import Proc, beat_command, stop_all, worker_command

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


# -- replay ---------------------------------------------------------------------------------


def replay(plan, submit_one, *, threads: int = 4) -> tuple[float, dict]:
    """Call submit_one(job) at each job's arrival time (from a few threads so one slow
    submission does not delay the next); {index: submitted epoch}."""
    submitted: dict = {}
    order = iter(sorted(plan, key=lambda j: j.arrival))
    lock = threading.Lock()
    t0 = time.time() + 1.0

    def worker():
        while not STOP.is_set():
            with lock:
                job = next(order, None)
            if job is None:
                return
            wait = t0 + job.arrival - time.time()
            if wait > 0:
                time.sleep(wait)
            stamp = time.time()
            try:
                if submit_one(job):
                    submitted[job.index] = stamp
            except Exception as exc:  # reported; the replay goes on
                log(f"submit of {job.index} failed: {exc}")

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return t0, submitted


def wait_done(slurm: BenchSlurm, prefix: str, deadline: float, pending_elsewhere=None) -> None:
    """Until no job of the phase is queued or running in Slurm (nor waiting in the platform),
    or the deadline."""
    while time.time() < deadline and not STOP.is_set():
        active = [n for n in slurm.active_names() if n.startswith(prefix)]
        other = pending_elsewhere() if pending_elsewhere else 0
        if not active and not other:
            return
        time.sleep(2.0)


def slurm_runs(slurm: BenchSlurm, prefix: str, submitted: dict, since: float) -> dict:
    """{index: (submitted, start, end)} from Slurm's own times (squeue --json keeps finished
    jobs for MinJobAge), for the phase's job names."""
    runs = {}
    for job in slurm.squeue_json():
        name = str(job.get("name", ""))
        suffix = name[len(prefix) :]
        # the phase's own jobs: an earlier run's of the same name are older than this phase
        if not name.startswith(prefix) or not suffix.isdigit():
            continue
        if float(job.get("submit_time") or 0) < since - 2:
            continue
        index = int(suffix)
        start, end = job.get("start_time") or 0, job.get("end_time") or 0
        state = job.get("job_state")
        if state == "PENDING" or (state == "CANCELLED" and (not start or start >= end)):
            start = 0
        if state in ("RUNNING", "CONFIGURING", "COMPLETING", "PENDING"):
            end = 0
        if index in submitted:
            runs[index] = (submitted[index], float(start) or None, float(end) or None)
    return runs


def slurm_phase(slurm: BenchSlurm, name: str, plan, drain_s: float) -> dict:
    prefix = f"sched-{name}-"
    slurm.cancel_prefix(prefix)

    def submit(job) -> bool:
        out = slurm.run(
            ["sbatch", "--parsable", "-J", f"{prefix}{job.index}", "-A", f"slurm-{job.tenant}",
             "-p", PARTITION, "-N", str(job.nodes), "--ntasks-per-node=1", "-c", "1",
             f"--gres=gpu:{job.gpus_per_node}", f"--mem={1024}", f"--time={job.time_limit_min}",
             "-o", "/dev/null", "-e", "/dev/null", "--wrap", f"exec sleep {job.duration}"]
        )  # fmt: skip
        return bool(out.strip())

    log(f"{name}: replaying {len(plan)} jobs")
    t0, submitted = replay(plan, submit)
    deadline = t0 + max(j.arrival for j in plan) + drain_s
    wait_done(slurm, prefix, deadline)
    end = min(time.time(), deadline)
    slurm.cancel_prefix(prefix)
    return {"t0": t0, "deadline": end, "runs": slurm_runs(slurm, prefix, submitted, t0)}


# -- Torus ------------------------------------------------------------------------------------


def torus_setup(slurm: BenchSlurm, capacity: int) -> dict:
    """The cluster row, one tenant per TENANTS entry (quota in GPUs, project `trace`, two
    users with tokens) in the platform's database."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.compute.models import AcceleratorType, Backend, Cluster
    from apps.compute.services import cluster_sync
    from apps.quotas.models import Quota
    from apps.tenancy import services
    from apps.tenancy.models import (
        AccessToken,
        Membership,
        Project,
        ProjectMember,
        Role,
        Tenant,
    )

    AcceleratorType.objects.get_or_create(
        gres_name="gpu",
        defaults={"name": "nvidia-gpu", "vendor": "NVIDIA", "resource_name": "nvidia.com/gpu",
                  "visible_devices_env": "CUDA_VISIBLE_DEVICES"},
    )  # fmt: skip
    cluster, _ = Cluster.objects.update_or_create(
        name=CLUSTER_NAME,
        defaults={
            "backend": Backend.SLURM,
            "is_default": False,
            "config": {
                "restd_url": slurm.conf["TORUS_SLURMRESTD_URL"],
                "api_version": slurm.conf["TORUS_SLURMRESTD_API"],
                "jwt_key_path": slurm.conf["TORUS_SLURM_JWT_KEY"],
                "slurm_conf": slurm.conf["SLURM_CONF"],
                "user": "root",
            },
        },
    )
    if not cluster_sync(cluster=cluster):
        cluster.refresh_from_db()
        raise RuntimeError(f"cluster {CLUSTER_NAME} did not answer: {cluster.last_error}")
    User = get_user_model()
    ctx = {"cluster": cluster, "tenants": {}, "quotas": {}}
    for name, _, quota_share, _ in TENANTS:
        owner, _ = User.objects.get_or_create(
            username=f"{name}-u0", defaults={"email": f"{name}-u0@example.org"}
        )
        tenant = Tenant.objects.filter(slug=name).first() or services.tenant_create(
            name=f"Benchmark {name}", slug=name, owner=owner
        )
        project, _ = Project.objects.get_or_create(
            tenant=tenant, slug=PROJECT, defaults={"name": "ITP trace replay"}
        )
        gpus = max(8, round(quota_share * capacity))
        Quota.objects.update_or_create(
            tenant=tenant, project=None, user=None, defaults={"gpus": gpus}
        )
        ctx["quotas"][name] = gpus
        tokens = {}
        for k in range(2):
            user, _ = User.objects.get_or_create(
                username=f"{name}-u{k}", defaults={"email": f"{name}-u{k}@example.org"}
            )
            role = Role.OWNER if k == 0 else Role.MEMBER
            Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
            ProjectMember.objects.get_or_create(project=project, user=user)
            AccessToken.objects.filter(
                tenant=tenant, user=user, name="bench-scheduling", revoked_at__isnull=True
            ).update(revoked_at=timezone.now())
            _, token = services.token_create(
                actor=None, user=user, tenant=tenant, name="bench-scheduling"
            )
            tokens[user.username] = token
        ctx["tenants"][name] = {"tenant": tenant, "project": project, "tokens": tokens}
    return ctx


def torus_finish(ctx, names_prefix: str) -> None:
    """Every benchmark job of the phase to a terminal state (cancel what is left)."""
    from apps.core.exceptions import Conflict
    from apps.jobs.models import Job
    from apps.jobs.services import job_cancel
    from apps.jobs.states import TERMINAL
    from apps.tenancy.access import actor_for_user

    for entry in ctx["tenants"].values():
        left = (
            Job.objects.filter(project=entry["project"], name__startswith=names_prefix)
            .exclude(state__in=list(TERMINAL))
            .select_related("user")
        )
        for job in left:
            with contextlib.suppress(Conflict):
                job_cancel(actor=actor_for_user(user=job.user), job=job)


def start_platform(logdir: Path) -> tuple[int, list]:
    from config.celery import app
    from scripts.devstack import start_web

    web, port = start_web(logdir, workers=1, name="web")
    app.control.purge()
    hostname = f"bench-sched-{os.getpid()}@{socket.gethostname()}"
    argv = worker_command(hostname=hostname, loglevel="INFO", queues="celery")
    worker = Proc("worker", argv, logdir)
    beat = Proc("beat", beat_command(schedule=logdir / "beat-schedule", loglevel="INFO"), logdir)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if worker.popen.poll() is not None:
            raise RuntimeError(f"celery worker exited:\n{worker.tail()}")
        if app.control.ping(destination=[hostname], timeout=1.0):
            return port, [web, worker, beat]
    raise RuntimeError(f"celery worker did not answer:\n{worker.tail()}")


def torus_phase(slurm: BenchSlurm, ctx, plan, drain_s: float, port: int, label: str) -> dict:
    from apps.jobs.models import Job, JobEvent
    from apps.jobs.states import State

    prefix = f"sched-{label}-"
    slurm.cancel_prefix(prefix)
    reconnecting(lambda: torus_finish(ctx, prefix))
    local = threading.local()

    def submit(job, name: str | None = None, resources: dict | None = None) -> bool:
        entry = ctx["tenants"][job.tenant]
        conn = getattr(local, "conn", None) or http.client.HTTPConnection(
            "127.0.0.1", port, timeout=120
        )
        local.conn = conn
        body = {
            "project": str(entry["project"].pk),
            "name": name or f"{prefix}{job.index}",
            "cluster": CLUSTER_NAME,
            "command": ["sleep", str(job.duration)],
            "resources": resources
            or {
                "nodes": job.nodes,
                "gpus_per_node": job.gpus_per_node,
                "cpus_per_task": 1,
                "memory": 1024,
                "time_limit": job.time_limit_min,
                "partition": PARTITION,
            },
        }
        headers = {
            "Authorization": f"Bearer {entry['tokens'][job.user]}",
            "Content-Type": "application/json",
        }
        for retry in (True, False):
            try:
                conn.request("POST", "/api/v1/jobs/", body=json.dumps(body), headers=headers)
                response = conn.getresponse()
                payload = response.read()
                break
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # uvicorn closed the idle keep-alive connection before this request reached
                # it (nothing was read): send again once on a new connection
                conn.close()
                conn = local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                if not retry:
                    raise
        if response.status != 201:
            log(f"POST {body['name']}: HTTP {response.status} {payload[:300]!r}")
            return False
        return True

    projects = [e["project"] for e in ctx["tenants"].values()]
    waiting = Job.objects.filter(project__in=projects, name__startswith=prefix)

    def in_platform() -> int:  # admitted or pending jobs Slurm has not seen yet
        return reconnecting(lambda: waiting.filter(state__in=[State.PENDING, State.QUEUED]).count())

    warm_up(ctx, port, submit_spec=submit)
    log(f"{label}: replaying {len(plan)} jobs through the API")
    t0, submitted = replay(plan, submit)
    deadline = t0 + max(j.arrival for j in plan) + drain_s
    wait_done(slurm, prefix, deadline, in_platform)
    end = min(time.time(), deadline)
    never_dispatched = in_platform()
    slurm.cancel_prefix(prefix)
    reconnecting(lambda: torus_finish(ctx, prefix))
    # the platform's own latencies: created -> admitted (QUEUED) -> accepted by Slurm
    admitted_at = dict(
        reconnecting(
            lambda: list(
                JobEvent.objects.filter(job__in=waiting, to_state=State.QUEUED).values_list(
                    "job_id", "created_at"
                )
            )
        )
    )
    decision, dispatch, held = [], [], 0
    rows = reconnecting(
        lambda: list(waiting.values_list("id", "created_at", "attempts__submitted_at"))
    )
    for job_id, created, submitted_at in rows:
        queued = admitted_at.get(job_id)
        if submitted_at:
            decision.append((submitted_at - created).total_seconds() * 1000)
        if queued and submitted_at:
            dispatch.append((submitted_at - queued).total_seconds() * 1000)
        if queued and (queued - created).total_seconds() > 1.0:
            held += 1
    return {
        "t0": t0,
        "deadline": end,
        "runs": slurm_runs(slurm, prefix, submitted, t0),
        "platform": {
            "submit_to_slurm_ms": _pcts(decision),
            "admitted_to_slurm_ms": _pcts(dispatch),
            "held_by_admission_over_1s": held,
            "never_dispatched": never_dispatched,
        },
    }


def warm_up(ctx, port: int, *, submit_spec) -> None:
    """One short job per user, waited for: the users' accounts, groups, Slurm associations
    and directories exist before the replay (a platform in service has them)."""
    from types import SimpleNamespace

    from apps.jobs.models import Job
    from apps.jobs.states import TERMINAL

    names = []
    for tenant, entry in ctx["tenants"].items():
        for user in entry["tokens"]:
            job = SimpleNamespace(tenant=tenant, user=user, duration=0)
            name = f"sched-warmup-{user}-{int(time.time())}"
            resources = {"gpus_per_node": 0, "time_limit": 1, "partition": PARTITION}
            if submit_spec(job, name=name, resources=resources):
                names.append(name)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        left = reconnecting(
            lambda: Job.objects.filter(name__in=names).exclude(state__in=list(TERMINAL)).count()
        )
        if not left:
            break
        time.sleep(1.0)
    states = reconnecting(
        lambda: list(Job.objects.filter(name__in=names).values_list("state", flat=True))
    )
    log(f"warm-up: {len(names)} jobs, states {sorted(set(states))}")


def _pcts(values):
    from _common import percentiles

    return {k: v for k, v in percentiles(values).items() if k in ("p50", "p99", "mean", "max")}


# -- the picture ------------------------------------------------------------------------------


def plot(path: Path, series: dict, jcts: dict, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib (pip install -e '.[bench]'): no PNG")
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for name, points in series.items():
        ax1.plot([p[0] for p in points], [100 * p[1] for p in points], label=name, lw=1.2)
    ax1.set_xlabel("seconds since the replay started")
    ax1.set_ylabel("GPUs allocated (%)")
    ax1.set_ylim(0, 105)
    ax1.legend()
    ax1.set_title("GPU allocation over time")
    names = list(jcts)
    ax2.boxplot([jcts[n] or [0] for n in names], tick_labels=names, showfliers=True, whis=(5, 95))
    ax2.set_ylabel("job completion time (s)")
    ax2.set_yscale("log")
    ax2.set_title("completion times (box: quartiles, whiskers: p5-p95)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


# -- main -------------------------------------------------------------------------------------


def plan_summary(plan, info: dict, *, nodes: int, node_gpus: int, waits: list[float]) -> dict:
    """What a plan allows before any run: its allocation bound and JCT floor, and the ideal
    no-latency schedules (FIFO, smallest first, smallest first with the starving rule)."""

    def ideal(order: str, starving_s=None) -> dict:
        return reference_schedule(
            plan, nodes=nodes, node_gpus=node_gpus, order=order, starving_s=starving_s
        )

    fifo, smallest = ideal("fifo"), ideal("smallest")
    line = {
        "nodes": nodes,
        **{k: info[k] for k in ("jobs", "replay_seconds", "offered_load", "jct_floor_s")},
        "gpu_allocation_bound": allocation_bound(plan, capacity=nodes * node_gpus),
        "jct_floor_vs_ideal_fifo": round(info["jct_floor_s"] / fifo["jct_mean_s"], 3),
        "ideal_fifo": fifo,
        "ideal_smallest_first": smallest,
        "ideal_smallest_vs_fifo_jct": round(smallest["jct_mean_s"] / fifo["jct_mean_s"], 3),
    }
    if waits:
        line["ideal_smallest_starving"] = {f"{w:g}": ideal("smallest", w) for w in waits}
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="32 nodes, a 12 h window")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--trace-cluster", default="cluster04")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--window-hours", type=float)
    parser.add_argument("--window-start-hour", type=float, help="default: the busiest window")
    parser.add_argument("--compression", type=float, default=720.0, help="trace s per real s")
    parser.add_argument("--load", type=float, default=1.0, help="arrival-rate multiplier")
    parser.add_argument(
        "--plan-only",
        metavar="LOADS",
        help="no services: per load (comma list) one JSON line with the plan's allocation bound,"
        " JCT floor and two ideal no-latency schedules (FIFO, smallest first), then exit",
    )
    parser.add_argument(
        "--plan-starving",
        metavar="SECONDS",
        help="with --plan-only: also the ideal smallest-first schedule with the platform's"
        " starving rule, one per wait (comma list of real seconds)",
    )
    parser.add_argument(
        "--plan-windows",
        metavar="HOURS",
        help="with --plan-only: every window of these lengths (comma list), starting every"
        " 3 trace hours, instead of the one window",
    )
    parser.add_argument(
        "--cap-hours", type=float, help="longest job, trace hours (default: window)"
    )
    parser.add_argument("--drain", type=float, help="real seconds after the last arrival")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument(
        "--torus-slurm-limits",
        action="store_true",
        help="also a Torus phase with tenant quotas as Slurm GrpTRES limits",
    )
    parser.add_argument(
        "--size-nice",
        type=float,
        help="Cluster.config size_nice for the Torus phases (default: the platform's, 1000)",
    )
    parser.add_argument(
        "--keep-records",
        action="store_true",
        help="keep the job records of earlier phases in slurmctld (default: cleared per phase)",
    )
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--keep-cluster", action="store_true", help="leave slurm-bench running")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    nodes = args.nodes or (32 if args.quick else 64)
    hours = args.window_hours or (12.0 if args.quick else 24.0)
    cap = args.cap_hours or hours
    drain = args.drain or (150.0 if args.quick else 300.0)
    phases = [p for p in args.phases.split(",") if p]
    for p in phases:
        if p not in PHASES + EXTRA_PHASES:
            parser.error(f"unknown phase {p}")
    if args.torus_slurm_limits and "torus-limits" not in phases:
        phases.append("torus-limits")

    trace = read_trace(args.trace, args.trace_cluster)
    start = (
        args.window_start_hour * 3600
        if args.window_start_hour is not None
        else busiest_window(trace, hours, cap * 3600)
    )

    def plan_at(load: float, *, at: float = start, hours: float = hours):
        return replay_plan(
            trace, cluster=args.trace_cluster, window_start=at, window_hours=hours,
            compression=args.compression, load=load, keep_fraction=min(1.0, nodes / 64),
            node_gpus=args.gpus_per_node, nodes=nodes, cap_hours=cap, prefix="",
        )  # fmt: skip

    capacity = nodes * args.gpus_per_node
    if args.plan_only:
        loads = [float(x) for x in args.plan_only.split(",")]
        waits = [float(x) for x in (args.plan_starving or "").split(",") if x]
        windows = [(start, hours)]
        if args.plan_windows:
            first = int(trace[0].submit // 3600) * 3600
            windows = [
                (float(at), float(length))
                for length in args.plan_windows.split(",")
                for at in range(first, int(trace[-1].submit - float(length) * 3600) + 1, 3 * 3600)
            ]
        for at, length in windows:
            for load in loads:
                plan, info = plan_at(load, at=at, hours=length)
                if not plan:
                    continue
                line = {"load": load, "window_start_hour": at / 3600, "window_hours": length}
                line["cap_hours"] = cap
                line.update(
                    plan_summary(plan, info, nodes=nodes, node_gpus=args.gpus_per_node, waits=waits)
                )
                print(json.dumps(line), flush=True)
        return 0
    plan, info = plan_at(args.load)
    info["gpu_allocation_bound"] = allocation_bound(plan, capacity=capacity)
    log(
        f"{args.trace_cluster} window {start / 3600:.0f}-{start / 3600 + hours:.0f} h: "
        f"{info['jobs']} jobs, offered load {info['offered_load']} over "
        f"{info['replay_seconds']} s, {capacity} GPUs, allocation bound "
        f"{info['gpu_allocation_bound']}, JCT floor {info['jct_floor_s']} s"
    )
    logdir = Path(f"/tmp/bench-scheduling-{os.getpid()}")  # noqa: S108
    logdir.mkdir(parents=True, exist_ok=True)
    slurm = BenchSlurm(nodes, args.gpus_per_node)

    def on_signal(signum, frame):
        STOP.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result, procs = None, []
    try:
        slurm.up()
        django_setup()
        from django.db import connections

        env_start = environment()
        ctx = torus_setup(slurm, capacity) if any(p.startswith("torus") for p in phases) else None
        quotas = (
            ctx["quotas"] if ctx else {n: max(8, round(q * capacity)) for n, _, q, _ in TENANTS}
        )
        slurm.accounts(quotas, limits=False)
        raw, platform = {}, {}
        for phase in phases:
            fresh_db(connections)  # PostgreSQL may have dropped idle connections meanwhile
            slurm.mode(slurm_mode(phase), clear=not args.keep_records)
            if phase.startswith("torus"):
                reconnecting(
                    lambda phase=phase: quota_mode(
                        ctx,
                        slurm,
                        in_slurm=phase.startswith(("torus-limits", "torus-lend")),
                        borrow=phase.startswith(("torus-borrow", "torus-lend")),
                        size_nice=0 if phase.endswith("-nonice") else args.size_nice,
                    )
                )
                if not procs:
                    port, procs = start_platform(logdir)
                out = torus_phase(slurm, ctx, plan, drain, port, phase)
                platform[phase] = out.pop("platform")
            else:
                out = slurm_phase(slurm, phase, plan, drain)
            out["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
            raw[phase] = out
            m = phase_metrics(plan, out["runs"], capacity=capacity, t0=out["t0"],
                              deadline=out["deadline"], scale=args.compression / 3600,
                              window_s=info["replay_seconds"])  # fmt: skip
            log(f"{phase}: {json.dumps(m)}")
        for proc in procs:
            proc.stop()
        (logdir / "runs.json").write_text(json.dumps(raw))
        metrics, series, jcts = {}, {}, {}
        for phase, out in raw.items():
            m = phase_metrics(plan, out["runs"], capacity=capacity, t0=out["t0"],
                              deadline=out["deadline"], scale=args.compression / 3600,
                              window_s=info["replay_seconds"])  # fmt: skip
            m["loadavg_end"] = out.get("loadavg_end")  # the machine is shared: how busy
            if phase in platform:
                m["platform"] = platform[phase]
            metrics[phase] = m
            series[phase] = allocation_series(
                plan, out["runs"], capacity=capacity, t0=out["t0"], deadline=out["deadline"]
            )
            jcts[phase] = [e - s for s, st, e in out["runs"].values() if st and e]
        heads = ("torus-lend", "torus-limits", "torus-borrow", "torus")
        head = next((p for p in heads if p in metrics), "torus")
        ratios = {}
        if head in metrics:
            t = metrics[head]
            for peer in ("backfill", "fairshare", "fifo"):
                if peer in metrics and metrics[peer]["jct_mean_s"] and t["jct_mean_s"]:
                    p = metrics[peer]
                    ratios[f"jct_mean_torus_vs_{peer}"] = round(
                        t["jct_mean_s"] / p["jct_mean_s"], 3
                    )
                    # the best any scheduler could do (no job waiting), for scale
                    ratios[f"jct_floor_vs_{peer}"] = round(info["jct_floor_s"] / p["jct_mean_s"], 3)
                    if p["queue_delay_p95_s"]:
                        ratios[f"queue_p95_torus_vs_{peer}"] = round(
                            t["queue_delay_p95_s"] / p["queue_delay_p95_s"], 3
                        )
                    ratios[f"allocation_torus_minus_{peer}"] = round(
                        t["gpu_allocation"] - p["gpu_allocation"], 3
                    )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        args.out.mkdir(parents=True, exist_ok=True)
        png = plot(
            args.out / f"scheduling-{stamp}.png", series, jcts,
            f"ITP {args.trace_cluster}, {hours:g} h window at {args.compression:g}x, load "
            f"{args.load:g}: {len(plan)} jobs on {nodes} x {args.gpus_per_node} GPUs",
        )  # fmt: skip
        result = {
            "benchmark": "scheduling",
            "metrics": {
                "headline": head,
                "by_scheduler": metrics,
                "trace": {
                    "file": args.trace.name,
                    "cluster": args.trace_cluster,
                    "window_start_hour": start / 3600,
                    "window_hours": hours,
                    "compression": args.compression,
                    "load": args.load,
                    "cap_hours": cap,
                    "drain_s": drain,
                    **info,
                },
                "cluster": {
                    "nodes": nodes,
                    "gpus_per_node": args.gpus_per_node,
                    "quotas_gpus": quotas,
                    **machine(slurm),
                },
                "environment_start": env_start,
                "environment_end": environment(),
                "plot": png,
            },
            "peers": {p: metrics[p] for p in metrics if not p.startswith("torus")},
            "ratios": ratios,
        }
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        STOP.set()
        stop_all()
        if not args.keep_cluster:
            slurm.stop()
            try:
                from django.db import connections

                fresh_db(connections)
                forget_cluster()
            except Exception as exc:  # reported; the result line still comes
                log(f"could not remove the cluster row {CLUSTER_NAME}: {exc}")
    return finish("scheduling", result, logdir=logdir, keep_logs=args.keep_logs)


def quota_mode(
    ctx, slurm: BenchSlurm, *, in_slurm: bool, borrow: bool = False, size_nice=None
) -> None:
    """Where the tenants' GPU quotas are held on the benchmark cluster: by Torus's admission
    (the default; with `borrow`, Cluster.config quota_borrowing: a job held by its tenant's
    quota runs on idle GPUs, apps/jobs/borrowing.py), or by Slurm (Cluster.config
    tenant_gpu_quota = "slurm": the platform sets each tenant account's GrpTRES, admission
    no longer holds jobs for it; with `borrow` too, idle GPUs are lent by raising it,
    apps/jobs/cluster_limits.py). `size_nice` sets Cluster.config size_nice (apps/jobs/
    priority.py cluster_nice; None: the platform's default)."""
    from apps.identity.services import group_name
    from apps.jobs import cluster_limits

    cluster = ctx["cluster"]
    config = {
        k: v
        for k, v in cluster.config.items()
        if k not in ("tenant_gpu_quota", "quota_borrowing", "size_nice")
    }
    if size_nice is not None:
        config["size_nice"] = size_nice
    if in_slurm:
        config["tenant_gpu_quota"] = "slurm"
    if borrow:
        config["quota_borrowing"] = True
    cluster.config = config
    cluster.save(update_fields=["config"])
    cluster_limits.forget(
        cluster=cluster, tenant_ids=[entry["tenant"].pk for entry in ctx["tenants"].values()]
    )
    for entry in ctx["tenants"].values():
        account = group_name(tenant=entry["tenant"])
        slurm.run(["sacctmgr", "-i", "add", "account", account, "parent=root"], check=False)
        slurm.run(
            ["sacctmgr", "-i", "modify", "account", "where", f"name={account}", "set",
             "GrpTRES=gres/gpu=-1"],
            check=False,
        )  # fmt: skip


def reconnecting(query):
    """query(), once more on a new connection if PostgreSQL dropped this one (the server is
    shared: another engineer's test may terminate every connection)."""
    from django.db import OperationalError, connections

    try:
        return query()
    except OperationalError as exc:
        log(f"database: {exc}; reconnecting")
        fresh_db(connections)
        return query()


def fresh_db(connections) -> None:
    """Drop this process's connections and its pool: the next query opens a new one."""
    for conn in connections.all():
        conn.close()
        if hasattr(conn, "close_pool"):
            conn.close_pool()


def forget_cluster() -> None:
    """Once the benchmark cluster stops, the platform must not place jobs on it nor report
    it down (/readyz pings every cluster): its row goes, with the benchmark tenants' jobs on
    it; if anyone else's job was placed there, only its nodes go."""
    from django.db.models.deletion import ProtectedError

    from apps.compute.models import Cluster, Node
    from apps.jobs.models import Job

    cluster = Cluster.objects.filter(name=CLUSTER_NAME).first()
    if cluster is None:
        return
    Job.objects.filter(cluster=cluster, tenant__slug__in=[t[0] for t in TENANTS]).delete()
    try:
        cluster.delete()
    except ProtectedError:
        Node.objects.filter(cluster=cluster).delete()
        log(f"other jobs reference cluster {CLUSTER_NAME}: kept its row, removed its nodes")


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


if __name__ == "__main__":
    sys.exit(main())
