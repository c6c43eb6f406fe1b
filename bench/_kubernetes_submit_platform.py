"""bench/kubernetes_submit.py's platform phase: jobs through the API beside their manifests."""

import statistics
import uuid
from pathlib import Path

from _common import cpu_per_job, ensure_tenant
from _kubernetes_submit_bench import Bench
from _kubernetes_submit_cluster import cpu_parts, log, platform_cluster, settle

from scripts.devstack import start_web


def platform_bodies(*, cluster, backend, project, since) -> list[dict]:
    """The peer's Jobs: the very manifests the dispatcher made for a round's attempts (the same
    environment, labels, volume and queue, in the same namespace), under fresh names."""
    from dataclasses import replace

    from apps.compute.backends.kubernetes import manifests
    from apps.jobs import dispatch
    from apps.jobs.models import JobAttempt

    rows = JobAttempt.objects.filter(job__project=project, job__created_at__gte=since)
    rows = rows.select_related("job", "job__tenant", "job__project__tenant", "job__user")
    resources, identity, bodies = dispatch.accelerator_resources(), None, []
    settings, pools = backend.settings, backend.pools()
    for attempt in rows:
        identity = identity or dispatch.prepare_identity(
            job=attempt.job, cluster=cluster, backend=backend
        )
        submission = dispatch.build_submission(attempt, cluster, identity, resources=resources)
        submission = replace(submission, tag=f"torus:{uuid.uuid4()}")
        bodies.append(manifests.job(settings=settings, submission=submission, pools=pools)[1])
    return bodies


def platform_phase(bench: "Bench", result: dict, *, logdir: Path, n: int) -> None:
    """N jobs through the REST API, admission and the dispatcher (bench/submit.py's phase),
    into a project whose cluster is local-k8s's control plane; the peer is the direct client's
    8-thread rate creating the same round's manifests again (platform_bodies), each side's
    round started on a settled control plane."""
    from django.utils import timezone
    from submit import start_worker, torus_phase

    from apps.compute.backends import for_cluster

    ctx = ensure_tenant(
        slug=f"bk8s{uuid.uuid4().hex[:6]}",
        project_slug="submit",
        owner="bench-k8s",
        token_name="bench-k8s",
    )
    bench.platform_tenant = tenant = ctx["tenant"].slug
    cluster = platform_cluster(cohort=f"bench-{tenant}")
    ctx["project"].default_cluster = cluster
    ctx["project"].save(update_fields=["default_cluster"])
    ctx["cluster"] = cluster
    backend = for_cluster(cluster)
    web, port = start_web(logdir, workers=2, name="web")
    roots = {"web": web.popen.pid, "worker": start_worker(logdir).popen.pid}
    log(f"control plane settled after {settle(timeout=300)} s (an earlier run's namespaces go)")
    torus_phase(ctx, port, min(20, n), 8, "platform warm-up")  # identity, tree, namespace
    # One POST per job (8 client threads), and POST /api/v1/jobs/batch/ (50 specs a request,
    # 4 threads), each beside the direct client's 8-thread rate measured right after it.
    for mode, batch, threads in (("post", 0, 8), ("batch", 50, 4)):
        rates, direct, cpu = [], [], {"platform": [], "direct": []}
        for rnd in range(bench.rounds):
            settle()
            since = timezone.now()
            before = cpu_parts(roots)
            out = torus_phase(ctx, port, n, threads, f"platform {mode} round {rnd}", batch=batch)
            settle()  # the work its Jobs set going (Kueue's Workloads, status, events) counts
            cpu["platform"].append(cpu_per_job(before, cpu_parts(roots), n))
            if out["http_errors"] or out["rejected"]:
                raise RuntimeError(
                    f"platform {mode} round {rnd}: {out['http_errors']} errors, "
                    f"{out['rejected']} rejected"
                )
            rates.append(out["jobs_per_second"])
            bodies = platform_bodies(
                cluster=cluster, backend=backend, project=ctx["project"], since=since
            )
            before = cpu_parts(roots)
            direct.append(bench.direct_rate(threads=8, label="", bodies=bodies))
            settle()
            cpu["direct"].append(cpu_per_job(before, cpu_parts(roots), n))
            log(f"round {rnd}: platform {mode} {rates[-1]} jobs/s, direct {direct[-1]:.1f} jobs/s")
        platform, peer = statistics.median(rates), statistics.median(direct)
        result["metrics"][f"platform_{mode}_jobs_per_second"] = round(platform, 1)
        result["metrics"][f"platform_{mode}_rounds"] = rates
        result["peers"][f"direct_jobs_per_second_8t_beside_{mode}"] = round(peer, 1)
        result["peers"][f"direct_rounds_8t_beside_{mode}"] = [round(r, 1) for r in direct]
        result["ratios"][f"platform_{mode}"] = round(platform / peer, 2)
        # CPU per job from a round's start until the control plane is quiet after it, by
        # part; each side's median round (by the machine's CPU)
        for side, rows in cpu.items():
            result["metrics"][f"cpu_ms_per_job_{side}_{mode}"] = sorted(
                rows, key=lambda row: row["machine"]
            )[len(rows) // 2]
