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
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "7")  # its web server's Redis databases: 7-9

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, VAR, django_setup, ensure_tenant, environment, finish, manage, percentiles
from _common import log as _log

from scripts.devstack import Proc, free_port, start_web, stop_all

MLFLOW_VENV = VAR / "bench" / "mlflow"
MLFLOW_SPEC = ["mlflow>=3.0,<4", "psycopg2-binary>=2.9"]
MLFLOW_DB = "torus_bench_mlflow"
MODEL = "bench-model"
N_METRICS = N_PARAMS = 20
ARTIFACT = os.urandom(1024)
OPS = ("create_version", "move_alias", "list_versions", "read_lineage", "get_model")
ONE_REQUEST_OPS = OPS[1:]


def log(msg: str) -> None:
    _log("registry", msg)


# -- MLflow: install, database, server --------------------------------------------------------


def mlflow_install() -> str:
    """MLflow in its own virtualenv (made with the system's Python, as the platform's)."""
    python = MLFLOW_VENV / "bin" / "python"
    if not (MLFLOW_VENV / "bin" / "mlflow").exists():
        log(f"installing {' '.join(MLFLOW_SPEC)} into {MLFLOW_VENV} (once; a few minutes)")
        MLFLOW_VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(MLFLOW_VENV)], check=True)  # noqa: S603
        subprocess.run(  # noqa: S603
            [str(python), "-m", "pip", "install", "--quiet", *MLFLOW_SPEC], check=True
        )
    out = subprocess.run(  # noqa: S603
        [str(python), "-c", "import mlflow; print(mlflow.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def mlflow_database() -> str:
    """A fresh database for MLflow on the platform's PostgreSQL; returns its SQLAlchemy URI."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db["HOST"],
        port=db["PORT"],
        user=db["USER"],
        password=db["PASSWORD"],
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{MLFLOW_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{MLFLOW_DB}"')
    from urllib.parse import quote

    user, password = quote(db["USER"], safe=""), quote(db["PASSWORD"], safe="")
    return f"postgresql+psycopg2://{user}:{password}@{db['HOST']}:{db['PORT']}/{MLFLOW_DB}"


def mlflow_start(logdir: Path, uri: str) -> tuple[Proc, str]:
    import httpx

    port = free_port()
    artifacts = logdir / "mlflow-artifacts"
    artifacts.mkdir()
    argv = [str(MLFLOW_VENV / "bin" / "mlflow"), "server", "--backend-store-uri", uri]
    argv += ["--serve-artifacts", "--artifacts-destination", str(artifacts)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORUS_", "DJANGO_"))}
    proc = Proc("mlflow", argv, logdir, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300  # the first start migrates the empty database
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"mlflow server exited:\n{proc.tail(40)}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"mlflow server did not answer /health:\n{proc.tail(40)}")


def _ok(response):
    if response.is_error:
        raise RuntimeError(
            f"{response.request.method} {response.request.url}: "
            f"{response.status_code} {response.text[:500]}"
        )
    return response.json() if response.content else {}


class MlflowOps:
    def __init__(self, url: str):
        import httpx

        self.http = httpx.Client(base_url=url, timeout=60)
        self.api = "/api/2.0/mlflow"
        exp = _ok(self.http.post(f"{self.api}/experiments/create", json={"name": "bench"}))
        self.experiment = exp["experiment_id"]
        _ok(self.http.post(f"{self.api}/registered-models/create", json={"name": MODEL}))
        self.requests = {}

    def create_version(self, i: int) -> int:
        now = int(time.time() * 1000)
        run = _ok(
            self.http.post(
                f"{self.api}/runs/create",
                json={"experiment_id": self.experiment, "start_time": now, "run_name": f"r{i}"},
            )
        )["run"]["info"]
        run_id, artifact_uri = run["run_id"], run["artifact_uri"]
        metrics = [
            {"key": f"metric_{k}", "value": k + i / 1000, "timestamp": now, "step": 0}
            for k in range(N_METRICS)
        ]
        params = [{"key": f"param_{k}", "value": str(k * i)} for k in range(N_PARAMS)]
        _ok(
            self.http.post(
                f"{self.api}/runs/log-batch",
                json={"run_id": run_id, "metrics": metrics, "params": params},
            )
        )
        dataset = {
            "name": "bench-data",
            "digest": "0" * 16,
            "source_type": "local",
            "source": '{"uri": "bench-data:1"}',
        }
        _ok(
            self.http.post(
                f"{self.api}/runs/log-inputs",
                json={"run_id": run_id, "datasets": [{"dataset": dataset, "tags": []}]},
            )
        )
        # mlflow-artifacts:/<experiment>/<run>/artifacts -> the server's artifact proxy
        path = artifact_uri.split(":", 1)[1].lstrip("/")
        _ok(
            self.http.put(
                f"/api/2.0/mlflow-artifacts/artifacts/{path}/model/model.bin", content=ARTIFACT
            )
        )
        version = _ok(
            self.http.post(
                f"{self.api}/model-versions/create",
                json={"name": MODEL, "source": f"{artifact_uri}/model", "run_id": run_id},
            )
        )["model_version"]
        self.requests["create_version"] = 5
        return int(version["version"])

    def move_alias(self, number: int) -> None:
        _ok(
            self.http.post(
                f"{self.api}/registered-models/alias",
                json={"name": MODEL, "alias": "production", "version": str(number)},
            )
        )
        self.requests["move_alias"] = 1

    def list_versions(self) -> int:
        rows = _ok(
            self.http.get(
                f"{self.api}/model-versions/search",
                params={"filter": f"name='{MODEL}'", "max_results": 50},
            )
        )
        self.requests["list_versions"] = 1
        return len(rows["model_versions"])

    def get_model(self) -> None:
        _ok(self.http.get(f"{self.api}/registered-models/get", params={"name": MODEL}))
        self.requests["get_model"] = 1

    def read_lineage(self, number: int) -> dict:
        version = _ok(
            self.http.get(
                f"{self.api}/model-versions/get", params={"name": MODEL, "version": str(number)}
            )
        )["model_version"]
        run = _ok(self.http.get(f"{self.api}/runs/get", params={"run_id": version["run_id"]}))
        self.requests["read_lineage"] = 2
        data = run["run"]["data"]
        return {
            "metrics": len(data.get("metrics", [])),
            "params": len(data.get("params", [])),
            "datasets": len(run["run"].get("inputs", {}).get("dataset_inputs", [])),
        }


# -- Torus ------------------------------------------------------------------------------------


def torus_fixture() -> dict:
    """The bench tenant, a project with its storage area, a succeeded job attempt and a
    committed dataset version to point lineage at; the previous run's model removed."""
    from apps.datasets.models import Dataset, DatasetVersion
    from apps.datasets.storage import storage_for
    from apps.datasets.tasks import project_storage_ensure
    from apps.jobs.models import Job, JobAttempt
    from apps.jobs.spec import JobSpecSerializer, normalise
    from apps.registry.models import RegisteredModel, Webhook

    world = ensure_tenant(
        slug="bench-registry",
        project_slug="models",
        owner="bench-registry-owner",
        token_name="bench-registry",
    )
    tenant, project, user = world["tenant"], world["project"], world["user"]
    project_storage_ensure(str(project.pk))
    Webhook.objects.filter(tenant=tenant).delete()
    for old in RegisteredModel.objects.filter(project=project, name=MODEL):
        storage_for("posix").delete(prefix=f"{tenant.slug}/{project.slug}/models/{old.pk}")
        old.delete()
    dataset, _ = Dataset.objects.get_or_create(tenant=tenant, project=project, name="bench-data")
    dv, _ = DatasetVersion.objects.get_or_create(
        dataset=dataset, number=1, defaults={"state": "committed"}
    )
    spec = JobSpecSerializer(
        data={"project": str(project.pk), "name": "bench-train", "command": ["true"]}
    )
    spec.is_valid(raise_exception=True)
    job = Job.objects.create(
        tenant=tenant, project=project, user=user, name="bench-train",
        spec=normalise(dict(spec.validated_data)), state="SUCCEEDED",
    )  # fmt: skip
    attempt = JobAttempt.objects.create(job=job, number=1, state="SUCCEEDED")
    attempt.dataset_versions.add(dv)
    return {**world, "attempt": attempt, "dataset_version": dv}


class TorusOps:
    def __init__(self, url: str, world: dict):
        import httpx

        self.http = httpx.Client(
            base_url=url, timeout=60, headers={"Authorization": f"Bearer {world['token']}"}
        )
        self.world = world
        model = _ok(
            self.http.post(
                "/api/v1/models/", json={"project": str(world["project"].pk), "name": MODEL}
            )
        )
        self.base = f"/api/v1/models/{model['id']}"
        self.requests = {}

    def create_version(self, i: int) -> int:
        body = {
            "metrics": {f"metric_{k}": k + i / 1000 for k in range(N_METRICS)},
            "params": {f"param_{k}": str(k * i) for k in range(N_PARAMS)},
            "dataset_versions": ["bench-data:1"],
            "source_attempt": str(self.world["attempt"].pk),
        }
        # a small version in one request: metadata and the file, stored and committed
        version = _ok(
            self.http.post(
                f"{self.base}/versions/",
                data={"metadata": json.dumps(body)},
                files={"file/model/model.bin": ("model.bin", ARTIFACT)},
            )
        )
        if version["state"] != "ready":
            raise RuntimeError(f"version {version['number']} is {version['state']}")
        self.requests["create_version"] = 1
        return version["number"]

    def move_alias(self, number: int) -> None:
        _ok(self.http.put(f"{self.base}/aliases/production/", json={"version": number}))
        self.requests["move_alias"] = 1

    def list_versions(self) -> int:
        rows = _ok(self.http.get(f"{self.base}/versions/", params={"page_size": 50}))
        self.requests["list_versions"] = 1
        return len(rows["results"])

    def get_model(self) -> None:
        _ok(self.http.get(f"{self.base}/"))
        self.requests["get_model"] = 1

    def read_lineage(self, number: int) -> dict:
        data = _ok(self.http.get(f"{self.base}/versions/{number}/lineage/"))
        self.requests["read_lineage"] = 1
        return {
            "metrics": len(data["metrics"]),
            "params": len(data["params"]),
            "datasets": len(data["dataset_versions"]),
        }


# -- the measurement --------------------------------------------------------------------------


ROUND = 10  # calls per system before the other takes its turn


def measure(systems: dict, n: int, warmup: int) -> tuple[dict, dict]:
    """(figures, each system's version numbers): each operation n times per system (after
    `warmup` untimed calls), one client thread, the systems taking turns in rounds of ROUND
    calls so that a change in the machine's load (other work shares the cores) falls on both
    alike: create n versions, move the alias over them, list the newest 50, read the lineage
    of each."""
    out = {name: {} for name in systems}
    numbers = {
        name: [ops.create_version(i) for i in range(warmup)] for name, ops in systems.items()
    }
    created = {name: [] for name in systems}

    def timed(op: str, make_calls) -> None:
        took = {name: [] for name in systems}
        calls = {name: make_calls(name, ops) for name, ops in systems.items()}
        for start in range(0, n, ROUND):
            for name in systems:
                for call in calls[name][start : start + ROUND]:
                    t0 = time.perf_counter()
                    call()
                    took[name].append((time.perf_counter() - t0) * 1000)
        for name, ops in systems.items():
            seconds = sum(took[name]) / 1000
            out[name][op] = {
                "ops_per_second": round(len(took[name]) / seconds, 1),
                "seconds": round(seconds, 3),
                "n": len(took[name]),
                "latency_ms": percentiles(took[name]),
                "requests_per_op": ops.requests.get(op),
            }
            log(
                f"{name} {op}: {out[name][op]['ops_per_second']} ops/s"
                f" (p50 {out[name][op]['latency_ms']['p50']} ms)"
            )

    timed(
        "create_version",
        lambda name, ops: [
            lambda i=i: created[name].append(ops.create_version(warmup + i)) for i in range(n)
        ],
    )
    for name, ops in systems.items():
        numbers[name] += created[name]
        for number in numbers[name][:warmup]:
            ops.move_alias(number)
            ops.list_versions()
            ops.read_lineage(number)
    timed(
        "move_alias",
        lambda name, ops: [lambda x=x: ops.move_alias(x) for x in created[name]],
    )
    listed = {name: [] for name in systems}
    timed(
        "list_versions",
        lambda name, ops: [lambda: listed[name].append(ops.list_versions()) for _ in range(n)],
    )
    seen = {name: [] for name in systems}
    timed(
        "read_lineage",
        lambda name, ops: [
            lambda x=x: seen[name].append(ops.read_lineage(x)) for x in created[name]
        ],
    )
    # the floor: one read of one model row, what any request costs in each stack
    timed("get_model", lambda name, ops: [ops.get_model for _ in range(n)])
    want = {"metrics": N_METRICS, "params": N_PARAMS, "datasets": 1}
    for name in systems:
        if set(listed[name]) != {min(50, len(numbers[name]))}:
            raise AssertionError(f"{name}: list_versions returned {sorted(set(listed[name]))}")
        if any(s != want for s in seen[name]):
            raise AssertionError(f"{name}: lineage read {seen[name][0]}, expected {want}")
    return out, numbers


def _client_of(ops):
    """Another client of the same system: the same state, its own keep-alive connection."""
    import httpx

    clone = copy.copy(ops)
    clone.http = httpx.Client(
        base_url=ops.http.base_url, timeout=60, headers=dict(ops.http.headers)
    )
    return clone


def measure_concurrent(systems: dict, numbers: dict, *, clients: int, n: int) -> dict:
    """Each one-request operation n times per system, from `clients` threads at once (each
    with its own connection, n / clients calls each), the systems in turn, twice, in
    alternating order: ops/s = calls over the wall time of both turns."""
    out = {name: {} for name in systems}
    calls = max(1, n // clients)
    pools = {name: [_client_of(ops) for _ in range(clients)] for name, ops in systems.items()}
    actions = {
        "move_alias": lambda ops, name, i: ops.move_alias(numbers[name][i % len(numbers[name])]),
        "list_versions": lambda ops, name, i: ops.list_versions(),
        "read_lineage": lambda ops, name, i: ops.read_lineage(
            numbers[name][i % len(numbers[name])]
        ),
        "get_model": lambda ops, name, i: ops.get_model(),
    }
    for op in ONE_REQUEST_OPS:
        act = actions[op]
        walls = {name: 0.0 for name in systems}
        for turn in range(2):
            order = list(systems) if turn == 0 else list(reversed(systems))
            for name in order:
                for k, client in enumerate(pools[name]):
                    act(client, name, k)  # warm each connection
                errors = []

                def run(client, offset, name=name, act=act, errors=errors):
                    try:
                        for i in range(calls):
                            act(client, name, offset + i)
                    except Exception as exc:  # reported after the turn
                        errors.append(exc)

                threads = [
                    threading.Thread(target=run, args=(client, k * calls))
                    for k, client in enumerate(pools[name])
                ]
                t0 = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                walls[name] += time.perf_counter() - t0
                if errors:
                    raise RuntimeError(f"{name} {op} with {clients} clients: {errors[0]}")
        for name in systems:
            out[name][op] = round(2 * calls * clients / walls[name], 1)
        log(
            f"{clients} clients, {op}: "
            + ", ".join(f"{name} {out[name][op]} ops/s" for name in systems)
        )
    for pool in pools.values():
        for client in pool:
            client.http.close()
    return out


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
