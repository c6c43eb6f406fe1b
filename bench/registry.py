"""Model registry benchmark: the same four operations through Torus's API and through an MLflow
tracking server (PyPI's mlflow, in its own virtualenv under .var/bench/mlflow, backed by the
same PostgreSQL in a database of its own), one client thread, keep-alive connections; then the
one-request operations again from several client threads at once (--clients), the throughput
each server reaches when it is never idle:

  create_version  a new version with 20 metrics, 20 parameters, a dataset it came from and a
                  1 KiB artifact file uploaded through the server
                  (Torus: one multipart POST versions, metadata and file, committed;
                   MLflow: runs/create, runs/log-batch, runs/log-inputs, PUT the artifact,
                   model-versions/create)
  move_alias      point `production` at the next version (Torus: PUT aliases/production;
                  MLflow: POST registered-models/alias)
  list_versions   the newest 50 versions of the model (Torus: GET versions; MLflow:
                  GET model-versions/search)
  read_lineage    a version's job/run, metrics, parameters and datasets (Torus: GET lineage;
                  MLflow: GET model-versions/get, then GET runs/get)
  get_model       not an aim: one read of the model's row (GET models/{id}/; GET
                  registered-models/get), what a request costs in each stack at least

Run alone:  .venv/bin/python bench/registry.py [--quick] [--versions N] [--clients 4,8]
            [--keep-logs]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "registry", "metrics": {...}, "peers": {...}, "ratios": {...}}
Ratios are Torus's operations per second over MLflow's (the aim: at least 2).
"""

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "7")  # its web server's Redis databases: 7-9

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, django_setup, environment, finish, manage
from _registry_measure import measure, measure_concurrent
from _registry_mlflow import (
    ARTIFACT,
    MLFLOW_DB,
    N_METRICS,
    N_PARAMS,
    ONE_REQUEST_OPS,
    OPS,
    MlflowOps,
    log,
    mlflow_database,
    mlflow_install,
    mlflow_start,
)
from _registry_torus import TorusOps, torus_fixture

from scripts.devstack import start_web, stop_all


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 versions instead of 200")
    parser.add_argument("--versions", type=int, help="versions created (and each op's count)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--clients",
        default="4,8",
        help="client threads for the concurrent phase, comma-separated ('' for none)",
    )
    parser.add_argument("--keep-logs", action="store_true")
    args, unknown = parser.parse_known_args()  # run_all passes its arguments to every script
    if unknown:
        log(f"ignoring arguments meant for other benchmarks: {' '.join(unknown)}")
    n = args.versions or (50 if args.quick else 200)
    logdir = Path(tempfile.mkdtemp(prefix="torus-bench-registry-"))

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result = None
    try:
        manage("migrate", "--noinput", "--verbosity", "0")
        django_setup()
        version = mlflow_install()
        env_start = environment()
        world = torus_fixture()
        _, port = start_web(logdir, workers=1)
        log(f"Torus on :{port}; MLflow {version} starting on a fresh database")
        _, mlflow_url = mlflow_start(logdir, mlflow_database())

        systems = {
            "mlflow": MlflowOps(mlflow_url),
            "torus": TorusOps(f"http://127.0.0.1:{port}", world),
        }
        measured, numbers = measure(systems, n, args.warmup)
        peer, torus = measured["mlflow"], measured["torus"]
        concurrent = {
            clients: measure_concurrent(systems, numbers, clients=clients, n=n)
            for clients in [int(c) for c in args.clients.split(",") if c.strip()]
        }
        result = {
            "benchmark": "registry",
            "metrics": {
                **{f"torus_{op}": torus[op] for op in OPS},
                "versions": n + args.warmup,
                "metrics_and_params_per_version": [N_METRICS, N_PARAMS],
                "artifact_bytes": len(ARTIFACT),
                "uvicorn_workers": 1,
                "concurrent": {
                    f"{clients}_clients": {op: figures["torus"][op] for op in ONE_REQUEST_OPS}
                    for clients, figures in concurrent.items()
                },
                "environment_start": env_start,
                "environment_end": environment(),
            },
            "peers": {
                "mlflow_version": version,
                "mlflow_workers": 1,
                "mlflow_backend": f"postgresql (the platform's server, database {MLFLOW_DB})",
                **{f"mlflow_{op}": peer[op] for op in OPS},
                "mlflow_concurrent": {
                    f"{clients}_clients": {op: figures["mlflow"][op] for op in ONE_REQUEST_OPS}
                    for clients, figures in concurrent.items()
                },
            },
            "ratios": {
                f"{op}_torus_vs_mlflow": round(
                    torus[op]["ops_per_second"] / peer[op]["ops_per_second"], 2
                )
                for op in OPS
            }
            | {
                f"{op}_torus_vs_mlflow_{clients}_clients": round(
                    figures["torus"][op] / figures["mlflow"][op], 2
                )
                for clients, figures in concurrent.items()
                for op in ONE_REQUEST_OPS
            },
        }
        log(f"ratios (Torus ops/s over MLflow's): {json.dumps(result['ratios'])}")
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        stop_all()
    return finish("registry", result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
