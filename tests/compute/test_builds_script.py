"""scripts/builds run for real (the engine and S3 gateway builds, cached here: seconds) into a
var dir of the test's own: its status file goes waiting, building, done through the steps; a
build that cannot be made ends failed with its log kept; a second builder does not start."""

import fcntl
import json
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

from scripts.devstack import free_port

ROOT = Path(__file__).resolve().parents[2]
BUILDS = ROOT / "scripts" / "builds"


def run_builds(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "TORUS_VAR_DIR": str(tmp_path / "var"),
        "TORUS_DATA_DIR": str(tmp_path / "data"),  # the engine is installed there
        **env,
    }
    return subprocess.run(
        [str(BUILDS), *args], capture_output=True, text=True, timeout=120, env=environ
    )


def status(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "var" / "run" / "builds" / f"{name}.json").read_text())


def test_the_engine_build_goes_through_its_steps_to_done(tmp_path):
    seen: list[tuple[str, int]] = []
    stop = threading.Event()

    def watch():  # what a reader of the status file sees along the way
        path = tmp_path / "var" / "run" / "builds" / "engine.json"
        while True:
            last = stop.is_set()  # one read more once the build has returned: its last state
            try:
                row = json.loads(path.read_text())  # never half a file: it is renamed in
            except FileNotFoundError:
                row = None
            if row and (not seen or seen[-1] != (row["state"], row["step"])):
                seen.append((row["state"], row["step"]))
            if last:
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        done = run_builds(tmp_path, "engine")
    finally:
        stop.set()
        watcher.join()
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert took < 60
    row = status(tmp_path, "engine")
    assert {k: row[k] for k in ("name", "state", "step", "steps", "step_name")} == {
        "name": "engine",
        "state": "done",
        "step": 2,
        "steps": 2,
        "step_name": "install it",
    }
    assert row["started"].endswith("Z") and row["finished"] >= row["started"]
    assert row["log"] == str(tmp_path / "var" / "log" / "builds.log")
    path = tmp_path / "var" / "run" / "builds" / "engine.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    order = [("waiting", 0), ("building", 1), ("building", 2), ("done", 2)]
    assert seen and seen[-1] == ("done", 2)
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen), seen
    log = Path(row["log"]).read_text()
    assert log.index("engine: step 1 of 2 (build llama-server)") < log.index(
        "engine: step 2 of 2 (install it)"
    )
    engine = tmp_path / "data" / "shared" / "engines" / "llama.cpp"
    assert (engine / "bin" / "llama-server").is_file()
    quiet = run_builds(tmp_path, "--status")
    assert quiet.returncode == 0 and quiet.stdout == ""


def test_a_build_that_cannot_be_made_ends_failed_with_its_log(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    # the build cache cannot be made under a file: scripts/build-llama-server fails at once
    failed = run_builds(tmp_path, "engine", TORUS_BUILD_CACHE=str(blocker / "cache"))
    assert failed.returncode == 1
    row = status(tmp_path, "engine")
    assert (row["state"], row["step"], row["step_name"]) == ("failed", 1, "build llama-server")
    assert row["finished"]
    log = Path(row["log"]).read_text()
    assert "Not a directory" in log and "engine: FAILED at step 1 of 2 (exit 1)" in log
    shown = run_builds(tmp_path, "--status")
    assert "engine (failed, step 1 of 2: build llama-server)" in shown.stdout
    waited = run_builds(tmp_path, "--wait", "engine")
    assert waited.returncode == 1 and "engine failed" in waited.stderr


def test_a_second_builder_does_not_start_while_one_runs(tmp_path):
    builds = tmp_path / "var" / "run" / "builds"
    builds.mkdir(parents=True)
    with open(builds / "builder.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a running builder holds it
        second = run_builds(tmp_path, "--background", "engine")
    assert second.returncode == 0
    assert "a builder already runs" in second.stdout
    assert not (builds / "engine.json").exists()


def test_in_the_background_it_returns_at_once_and_finishes(tmp_path):
    started = run_builds(tmp_path, "--background", "engine")
    assert started.returncode == 0, started.stderr
    assert "building engine in the background" in started.stdout
    row = status(tmp_path, "engine")  # there as soon as it returns, with the builder's pid
    assert row["state"] in ("waiting", "building", "done")
    assert f"(pid {row['pid']};" in started.stdout
    waited = run_builds(tmp_path, "--wait", "engine")  # what a script does before serving
    assert waited.returncode == 0, waited.stderr
    assert status(tmp_path, "engine")["state"] == "done"


def test_the_s3_gateway_is_built_and_started_in_the_background_with_its_keys_first(tmp_path):
    """`make up` writes the gateway's keys for the portal (`components/s3 env`), then builds
    and starts the gateway in the background: cached here, so seconds."""
    env = {"TORUS_S3_PORT": str(free_port())}
    component = ROOT / "platform" / "services" / "components" / "s3"
    environ = {**os.environ, "TORUS_VAR_DIR": str(tmp_path / "var"), **env}
    keys = subprocess.run([str(component), "env"], capture_output=True, text=True, env=environ)
    assert keys.returncode == 0, keys.stderr
    written = (tmp_path / "var" / "secrets" / "services.env").read_text()
    assert f"TORUS_S3_ENDPOINT_URL=http://127.0.0.1:{env['TORUS_S3_PORT']}" in written
    assert "TORUS_S3_ACCESS_KEY=" in written and not (tmp_path / "var" / "s3").exists()
    try:
        done = run_builds(tmp_path, "s3", **env)
        assert done.returncode == 0, done.stdout + done.stderr
        row = status(tmp_path, "s3")
        assert (row["state"], row["step"], row["steps"], row["step_name"]) == (
            "done",
            2,
            2,
            "start it",
        )
        up = subprocess.run([str(component), "status"], capture_output=True, text=True, env=environ)
        assert up.returncode == 0 and f"127.0.0.1:{env['TORUS_S3_PORT']}" in up.stdout
        assert (tmp_path / "var" / "secrets" / "services.env").read_text() == written
    finally:
        subprocess.run([str(component), "stop"], capture_output=True, env=environ, check=True)
