"""bench/registry.py's constants and its peer: MLflow installed, its database, its server."""

import os
import subprocess
import time
from pathlib import Path

from _common import VAR
from _common import log as _log

from scripts.devstack import Proc, free_port

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
