"""bench/scheduling.py's Torus phases: the platform set up, started, warmed and timed."""

import contextlib
import http.client
import json
import os
import socket
import threading
import time
from pathlib import Path

from _common import RESULTS
from _scheduling_cluster import CLUSTER_NAME, PARTITION, PROJECT, BenchSlurm, log
from _scheduling_estimates import EstimateSampler, estimate_report
from _scheduling_replay import replay, slurm_runs, wait_done
from _scheduling_trace import TENANTS

from scripts.devstack import Proc, beat_command, worker_command

PAST_PREFIX = "sched-past-"  # the ended runs past_runs writes

# -- Torus ------------------------------------------------------------------------------------


def torus_setup(slurm: BenchSlurm, capacity: int) -> dict:
    """The cluster row, one tenant per TENANTS entry (quota in GPUs, project `trace`, two
    users with tokens) in the platform's database."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.compute.models import AcceleratorType, Backend, Cluster
    from apps.compute.services import cluster_sync
    from apps.quotas.models import Quota
    from apps.tenancy import services
    from apps.tenancy.models import AccessToken, Membership, Project, ProjectMember, Role, Tenant

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
                "control_plane": settings.TORUS_CONTROL_PLANE,  # the benchmark's processes only
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


def past_runs(ctx, history: list, *, cluster) -> int:
    """The trace's jobs before the window, as ended runs on the benchmark cluster, each by its
    user in its tenant's project and as long as the replay makes it: what a platform that has
    been running learns run times from (apps/jobs/runtimes.py). Replaced on every call."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.jobs.models import AttemptState, Job, JobAttempt

    Job.objects.filter(cluster=cluster, name__startswith=PAST_PREFIX).delete()
    users = get_user_model().objects.filter(username__in={job.user for job in history})
    users = {user.username: user for user in users}
    now, span = timezone.now(), max((job.arrival for job in history), default=0.0)
    rows, attempts = [], []
    for job in history:
        entry = ctx["tenants"][job.tenant]
        ended = now - timedelta(seconds=span - job.arrival + 60)
        name = f"{PAST_PREFIX}{job.index}"
        rows.append(
            Job(tenant=entry["tenant"], project=entry["project"], user=users[job.user],
                name=name, spec={"name": name}, state="SUCCEEDED", cluster=cluster,
                partition=PARTITION, gpus=job.gpus, cpus=job.nodes, memory_mb=1024,
                created_at=ended - timedelta(seconds=job.duration))
        )  # fmt: skip
        attempts.append(
            JobAttempt(job=rows[-1], number=1, state=AttemptState.SUCCEEDED,
                       started_at=ended - timedelta(seconds=max(job.duration, 1.0)),
                       ended_at=ended)
        )  # fmt: skip
    Job.objects.bulk_create(rows, batch_size=1000)
    JobAttempt.objects.bulk_create(attempts, batch_size=1000)
    return len(rows)


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
    from apps.compute.models import Cluster
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
    cluster_id = reconnecting(lambda: Cluster.objects.get(name=CLUSTER_NAME).pk)
    sampler = EstimateSampler(slurm, cluster_id=cluster_id, prefix=prefix)
    sampler.start()
    log(f"{label}: replaying {len(plan)} jobs through the API")
    t0, submitted = replay(plan, submit)
    deadline = t0 + max(j.arrival for j in plan) + drain_s
    wait_done(slurm, prefix, deadline, in_platform)
    sampler.stop()
    end = min(time.time(), deadline)
    names = {
        str(pk): name for pk, name in reconnecting(lambda: list(waiting.values_list("id", "name")))
    }
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
    decision, dispatch, held, platform_s = [], [], 0, {}
    rows = reconnecting(
        lambda: list(waiting.values_list("id", "created_at", "attempts__submitted_at"))
    )
    for job_id, created, submitted_at in rows:
        queued = admitted_at.get(job_id)
        if submitted_at:
            decision.append((submitted_at - created).total_seconds() * 1000)
            index = names.get(str(job_id), "")[len(prefix) :]
            if index.isdigit():  # the first attempt's: a job's time before Slurm had it
                platform_s.setdefault(int(index), (submitted_at - created).total_seconds())
        if queued and submitted_at:
            dispatch.append((submitted_at - queued).total_seconds() * 1000)
        if queued and (queued - created).total_seconds() > 1.0:
            held += 1
    runs = slurm_runs(slurm, prefix, submitted, t0)
    png = RESULTS / f"scheduling-{label}-expected-start-{time.strftime('%Y%m%dT%H%M%S')}.png"
    expected = estimate_report(sampler, names=names, runs=runs, png=png)
    log(f"{label}: expected starts: {json.dumps(expected)}")
    reasons = {
        int(name[len(prefix) :]): samples
        for name, samples in sampler.reasons.items()
        if name[len(prefix) :].isdigit()
    }
    return {
        "t0": t0,
        "deadline": end,
        "runs": runs,
        "platform_s": platform_s,
        "reasons": reasons,
        "platform": {
            "expected_start": expected,
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
