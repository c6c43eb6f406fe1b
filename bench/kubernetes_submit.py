"""Kubernetes backend benchmark, against the local control plane (platform/services
components/kubernetes: etcd, kube-apiserver, scheduler, controller manager, kwok, Kueue):

  submit      N attempts through the platform's submit path (KubernetesBackend.submit: the
              tenant's place from the cache, the manifests built and validated, the Job
              created), until every one has a Kubernetes Job; 1 and 8 threads
  peer        the same N Jobs (the same dicts, fresh names) created by direct calls of the
              official client (BatchV1Api.create_namespaced_job) against the same apiserver,
              1 and 8 threads; and (a floor, not an aim) one plain POST per Job through the
              client's ApiClient with no validation and no models
  watched     the time until the watcher (watch.py, in a process of its own as kube_watch
              runs) has a record of each of the N Jobs
  pass_calls  Kubernetes requests of one reconcile pass's backend calls (jobs, inventory,
              accounting) with 10 and with M jobs held (counted in KubeClient.request)
  platform    P jobs a round (600; 100 with --quick) through the whole platform, as
              bench/submit.py does for Slurm: one
              POST /api/v1/jobs/ each (8 client threads), and 50 specs a POST to
              /api/v1/jobs/batch/ (4 threads), uvicorn with 2 workers, into a
              project whose cluster (`bench-k8s-platform`: local-k8s's control plane and
              settings, with the bench's queue rule) it is, admission, and a Celery worker's
              dispatcher (identity, the project's tree, the Submission, KubernetesBackend.submit)
              until every attempt has its Kubernetes Job; beside the direct client's 8-thread
              rate on the same apiserver creating the round's very manifests again (fresh
              names, the same namespace and Kueue queue), each round on either side started
              on a quiet control plane (the issue's aim: at least 0.8x). Each round's CPU
              by part (the control plane's processes, web server, worker, PostgreSQL,
              Redis, this process, the machine), per job, from its start until the
              control plane is quiet again: the Workloads, status updates and events a Job
              sets going count for the side that made it. --split-cores runs the control
              plane on CPU 0 and everything else on the others, as on separate machines.
              Needs the portal's database migrated and `manage.py cluster_register_local`
              run (`make up` does both).

Each method runs three times per thread count, in rotated orders (the apiserver gets busier
as Jobs pile up), and its median round counts. The pass count comes first, with exactly 10
and then M jobs held. Kueue admits one bench Job at a time (its own cohort, one CPU of
quota): the others wait suspended, without pods, so other work on the shared fake nodes is
not disturbed.

Jobs ask for no GPU and one CPU, and kwok keeps their pods running (10 minutes), so nothing
ends during the measurement; the bench's namespaces are deleted at the end.

Run alone:  .venv/bin/python bench/kubernetes_submit.py [--quick] [--jobs N] [--held M]
            [--phases backend,platform] [--platform-jobs P] [--split-cores]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "kubernetes_submit", "metrics": {...}, "peers": {...}, "ratios": {...}}
Ratios are Torus's Jobs per second over the direct client's (the aim: at least 0.8).
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "12")  # its cache DB (13) holds the watch records

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import django_setup, finish
from _kubernetes_submit_bench import Bench
from _kubernetes_submit_cluster import NAME, split_cores
from _kubernetes_submit_platform import platform_phase

from scripts.devstack import stop_all


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 jobs per phase")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per submit phase (300)")
    parser.add_argument(
        "--platform-jobs", type=int, default=None, help="jobs per platform round (600)"
    )
    parser.add_argument("--held", type=int, default=500, help="jobs held for the pass count")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument(
        "--split-cores",
        action="store_true",
        help="the control plane on the first CPU, the platform and this bench on the others",
    )
    parser.add_argument(
        "--phases", default="backend,platform", help="backend (submit, peers, pass calls), platform"
    )
    args = parser.parse_args()
    n = args.jobs or (100 if args.quick else 300)
    phases = set(args.phases.split(","))
    django_setup()
    logdir = Path(tempfile.mkdtemp(prefix="bench-k8s-"))
    bench = Bench(n=n, held=args.held)
    if args.split_cores:
        split_cores()
    try:
        result = bench.run() if "backend" in phases else bench.empty()
        if "platform" in phases:
            platform_n = args.platform_jobs or (100 if args.quick else 600)
            platform_phase(bench, result, logdir=logdir, n=platform_n)
        result["metrics"]["split_cores"] = args.split_cores
    finally:
        bench.cleanup()
        stop_all()
        if args.split_cores:
            split_cores(undo=True)
    return finish(NAME, result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    sys.exit(main())
