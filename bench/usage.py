#!/usr/bin/env python3
"""Usage samples (issue 36 item 5): what one sample of every running job costs
(apps/logs/usage.py: sstat of each owner's jobs, run as the owner by the privileged helper,
then the points stored and the idleness rules), beside the peer, raw `sstat` of the same jobs
run as root by hand, in the same run.

N sleeping jobs of one person run on the local Slurm (dispatched by the platform's own code in
this process, as the worker dispatches them). Then P passes of each; CPU per pass by process:
this one (the worker's share), the helper with its sstat children, slurmd (the nodes answer
sstat), slurmctld, PostgreSQL and Redis.

    .venv/bin/python bench/usage.py [--jobs 24] [--passes 10]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_parts, django_setup, ensure_tenant, environment, finish, log

NAME = "usage"
PARTS = {
    "slurmd": ("slurmd",),
    "slurmctld": ("slurmctld",),
    "postgres": ("postgres",),
    "redis": ("redis-server",),
}


def helper_pid() -> int:
    import json

    from django.conf import settings

    config = json.loads((Path(settings.VAR_DIR) / "helper" / "config.json").read_text())
    return int(Path(config["pidfile"]).read_text().split()[0])


def running_jobs(ctx, *, jobs: int) -> list:
    from apps.jobs.models import AttemptState, Job
    from apps.jobs.services import job_submit_many
    from apps.jobs.spec import JobSpecSerializer, normalise
    from apps.jobs.tasks import control_pass
    from apps.tenancy.access import actor_for_user

    actor = actor_for_user(user=ctx["user"], token=None)
    data = {
        "project": str(ctx["project"].pk),
        "name": "usage-bench",
        "command": ["sleep", "600"],
        "cluster": "local",
        "resources": {"gpus_per_node": 0, "cpus_per_task": 1, "memory": "64M", "time_limit": 15},
    }
    serializer = JobSpecSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    spec = normalise(dict(serializer.validated_data))
    made = job_submit_many(actor=actor, items=[(ctx["project"], spec)] * jobs)
    ids = [job.pk for job in made]
    deadline = time.monotonic() + 300
    while Job.objects.filter(pk__in=ids, attempts__state=AttemptState.RUNNING).count() < jobs:
        assert time.monotonic() < deadline, "the jobs did not all start"
        control_pass()
        time.sleep(0.5)
    return made


def passes(fn, *, count: int, roots: dict) -> dict:
    walls = []
    before = cpu_parts(roots, PARTS)
    for _ in range(count):
        started = time.perf_counter()
        fn()
        walls.append((time.perf_counter() - started) * 1000)
    after = cpu_parts(roots, PARTS)
    cpu = {part: round((after[part] - before[part]) * 1000 / count, 2) for part in after}
    return {"wall_ms_per_pass": round(statistics.median(walls), 1), "cpu_ms_per_pass": cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--passes", type=int, default=10)
    args = parser.parse_args()
    django_setup()
    from django.conf import settings

    from apps.compute.envfile import read_env_file
    from apps.jobs.models import Job
    from apps.jobs.services import job_cancel_locked
    from apps.jobs.tasks import control_pass
    from apps.logs.usage import usage_pass

    ctx = ensure_tenant(
        slug="bench-usage", project_slug="usage", owner="bench-usage", token_name="usage"
    )
    logdir = Path(tempfile.mkdtemp(prefix="torus-bench-usage-"))
    result = None
    made = []
    try:
        log(NAME, f"{args.jobs} sleeping jobs on the local Slurm")
        made = running_jobs(ctx, jobs=args.jobs)
        account = ctx["user"].posix_account
        ids = [job.attempts.get().backend_id for job in made]
        roots = {"torus": helper_pid()}
        usage_pass()  # the first sample of each attempt sets its baseline
        torus = passes(usage_pass, count=args.passes, roots=roots)
        sstat = ["/usr/bin/sstat", "--allsteps", "--noheader", "--parsable2", "--jobs"]
        sstat.append(",".join(ids))
        slurm_env = {**os.environ, **read_env_file(Path(settings.VAR_DIR) / "slurm" / "env")}

        def raw():
            out = subprocess.run(  # noqa: S603 (a fixed argv of job numbers)
                sstat, capture_output=True, text=True, env=slurm_env, check=True
            )
            assert out.stdout.count("\n") >= len(ids), out.stdout[:500]

        peer = passes(raw, count=args.passes, roots={})
        torus_cpu = sum(torus["cpu_ms_per_pass"][p] for p in ("bench", "torus", "slurmd"))
        peer_cpu = sum(peer["cpu_ms_per_pass"][p] for p in ("bench", "slurmd"))
        result = {
            "benchmark": NAME,
            "environment": environment(),
            "jobs": args.jobs,
            "owner": account.name,
            "passes": args.passes,
            "metrics": {"torus_usage_pass": torus},
            "peers": {"raw_sstat": peer},
            "ratios": {
                "wall_torus_vs_raw_sstat": round(
                    torus["wall_ms_per_pass"] / peer["wall_ms_per_pass"], 2
                ),
                "cpu_caller_helper_slurmd_vs_raw_sstat": round(torus_cpu / peer_cpu, 2),
            },
        }
        log(NAME, f"torus {torus_cpu:.1f} ms CPU a pass, raw sstat {peer_cpu:.1f} ms")
    finally:
        for job in Job.objects.filter(pk__in=[j.pk for j in made]):
            from django.db import transaction

            with transaction.atomic():
                locked = Job.objects.select_for_update().get(pk=job.pk)
                job_cancel_locked(job=locked, reason="benchmark over")
        for _ in range(20):
            control_pass()  # the cancels reach Slurm
            if not Job.objects.filter(pk__in=[j.pk for j in made], state="RUNNING").exists():
                break
            time.sleep(0.5)
    return finish(NAME, result, logdir=logdir, keep_logs=False)


if __name__ == "__main__":
    sys.exit(main())
