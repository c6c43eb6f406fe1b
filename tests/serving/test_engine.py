"""The engine as built by `make engines` (scripts/build-llama-server), and the fit estimate
against what it reports: llama-server started on the generated GQA and MHA models with f16
and q8_0 KV caches; its load-time log lines (the KV cache, the model buffer, the compute and
output buffers) parsed and compared with apps/compute/fit.py's numbers: the KV cache exactly,
the weights within 0.5 %, the compute and output buffers under the estimate's activations."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from apps.compute import fit
from apps.serving.gguf_config import config_from_gguf
from scripts.devstack import free_port

REPO = Path(__file__).resolve().parents[2]
MAKE_MODEL = REPO / "examples" / "serving" / "make_tiny_llama.py"
MiB = fit.MiB
KEY = "engine-test-key"
WEIGHTS_TOLERANCE = 0.005  # the model buffer: the tensors plus alignment padding
KV_RE = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\),"
    r" K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)
MODEL_BUFFER_RE = re.compile(r"(\S+) model buffer size = +([\d.]+) MiB")
COMPUTE_RE = re.compile(r"(\S+) compute buffer size = +([\d.]+) MiB")
OUTPUT_RE = re.compile(r"(\S+) +output buffer size = +([\d.]+) MiB")


def engine() -> str:
    server = settings.TORUS_LLAMA_SERVER
    assert os.access(server, os.X_OK), f"{server} missing: run `make engines` (make test does)"
    return server


def make_model(out: Path, *args: str) -> Path:
    subprocess.run(
        [sys.executable, str(MAKE_MODEL), str(out), "--vocab", settings.TORUS_LLAMA_VOCAB, *args],
        check=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("engine-models")
    return {
        "gqa": make_model(root / "gqa.gguf"),  # 4 layers, hidden 256, 4 heads, 2 KV heads
        "mha": make_model(root / "mha.gguf", "--kv-heads", "4"),
        "q8": make_model(root / "q8.gguf", "--weights", "q8_0", "--ff", "704", "--layers", "2"),
    }


class Engine:
    """llama-server on 127.0.0.1 with the platform's replica flags (-np, -c slots x context,
    the KV cache type), its log in a file; stopped by its pid."""

    def __init__(self, model: Path, *, slots: int, context: int, kv: str, log: Path):
        self.port = free_port()
        self.log = log
        argv = [engine(), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
        argv += ["-np", str(slots), "-c", str(slots * context), "-t", "1", "--metrics"]
        argv += ["-ctk", kv, "-ctv", kv, "-lv", "4"]
        with log.open("wb") as out:
            self.process = subprocess.Popen(  # the key in the environment, never argv
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LLAMA_API_KEY": KEY},
            )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"llama-server exited: {self.text()[-3000:]}"
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"llama-server not ready in {timeout} s: {self.text()[-3000:]}")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def run_engine(tmp_path):
    started: list[Engine] = []

    def start(model: Path, *, slots: int = 4, context: int = 2048, kv: str = "f16") -> Engine:
        server = Engine(
            model, slots=slots, context=context, kv=kv, log=tmp_path / f"engine-{len(started)}.log"
        )
        started.append(server)
        server.wait_ready()
        return server

    yield start
    for server in started:
        server.stop()


def reported(log: str) -> dict:
    """The sizes llama-server printed while loading, in MiB."""
    kv = KV_RE.search(log)
    assert kv, f"no llama_kv_cache size line in:\n{log[-4000:]}"
    models = MODEL_BUFFER_RE.findall(log)
    computes = COMPUTE_RE.findall(log)
    outputs = OUTPUT_RE.findall(log)
    assert models and computes and outputs, f"no buffer sizes in:\n{log[-4000:]}"
    return {
        "kv": float(kv.group(1)),
        "cells_per_seq": int(kv.group(2)),
        "layers": int(kv.group(3)),
        "seqs": int(kv.group(5)),
        "k_type": kv.group(6),
        "k": float(kv.group(7)),
        "v": float(kv.group(9)),
        "weights": sum(float(size) for _, size in models),
        "compute": sum(float(size) for _, size in computes),
        "output": sum(float(size) for _, size in outputs),
    }


CASES = [  # model, slots, context per slot, KV cache type
    ("gqa", 4, 2048, "f16"),
    ("gqa", 4, 2048, "q8_0"),
    ("mha", 4, 2048, "f16"),
    ("mha", 4, 2048, "q8_0"),
    ("gqa", 3, 300, "f16"),  # 900 cells asked for: 1024 / 3 -> 512 a slot
    ("mha", 1, 5000, "q8_0"),
    ("q8", 2, 1024, "f16"),
]


@pytest.mark.parametrize(("name", "slots", "context", "kv"), CASES)
def test_estimate_matches_the_engines_report(models, run_engine, name, slots, context, kv):
    server = run_engine(models[name], slots=slots, context=context, kv=kv)
    got = reported(server.text())
    model = config_from_gguf(models[name])
    report = fit.estimate_deployment(
        model_config=model,
        device_memory_bytes=None,
        device_name="host memory",
        gpus=0,
        slots=slots,
        context=context,
        kv_cache_type=kv,
    )
    cells = fit.engine_cells(slots=slots, context=context)
    assert (got["seqs"], got["cells_per_seq"] * got["seqs"]) == (slots, cells)
    assert got["layers"] == model.layers and got["k_type"] == kv
    # the KV cache: exact (to the engine's two decimals)
    assert got["kv"] == round(report.breakdown["kv_cache"] / MiB, 2)
    assert got["k"] == got["v"] == round(report.breakdown["kv_cache"] / 2 / MiB, 2)
    # the weights: within the stated tolerance
    weights = got["weights"] * MiB  # printed to 0.01 MiB
    assert abs(weights - model.weights_bytes) <= WEIGHTS_TOLERANCE * weights + 0.005 * MiB
    # the compute and output buffers: under the activations estimate, and not far under it
    buffers = (got["compute"] + got["output"]) * MiB
    assert buffers <= report.breakdown["activations"] <= 4 * buffers + 16 * MiB, got


def test_hidden_size_formula_would_double_the_gqa_cache(models, run_engine):
    got = reported(run_engine(models["gqa"]).text())
    model = config_from_gguf(models["gqa"])
    hidden_formula = model.layers * 2 * model.hidden * 8192 * 2 / MiB
    assert (got["kv"], hidden_formula) == (16.0, 32.0)


def test_engine_serves_with_its_key(models, run_engine):
    server = run_engine(models["gqa"], slots=2, context=512)
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
    assert httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).status_code == 401
    response = httpx.post(
        f"{server.url}/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 8
    metrics = httpx.get(
        f"{server.url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    )
    assert "llamacpp:requests_processing" in metrics.text


def test_engine_is_the_pinned_build():
    version = subprocess.run(
        [engine(), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert "commit 0c1e570" in version.stdout + version.stderr
    # a second build is a no-op: the cached directory, the binary untouched
    cached = subprocess.run(
        [str(REPO / "scripts" / "build-llama-server")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    binary = Path(cached) / "bin" / "llama-server"
    before = binary.stat().st_mtime_ns
    again = subprocess.run(
        [str(REPO / "scripts" / "build-llama-server")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert again.stdout.strip() == cached and again.stderr == ""
    assert binary.stat().st_mtime_ns == before
    assert Path(settings.TORUS_LLAMA_SERVER).read_bytes() == binary.read_bytes()
