"""Self-healing with a real PyTorch data-parallel run: a node taken down mid-run, the job
comes back on its own from the latest checkpoint and ends exactly where an uninterrupted run
with the same seed ends."""

import json
import re
from pathlib import Path

import pytest
from django.conf import settings

from apps.jobs.models import AttemptState
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, output, slurm, submit

# Jobs run as their users: the examples and their environment come from the shared
# read-only root (`make examples-venv` puts them there; make test does).
SHARED = Path(settings.TORUS_SHARED_ROOTS[0])
TORCH_VENV = SHARED / "envs" / "torch"
EXAMPLES = SHARED / "examples"
STEPS = 60


def training_spec() -> dict:
    assert (TORCH_VENV / "bin" / "python").exists(), "run `make examples-venv` (make test does)"
    assert (EXAMPLES / "train_ddp.py").exists(), "run `make examples-venv` (make test does)"
    return {
        "name": "ddp-example",
        "command": [
            "python",
            "train_ddp.py",
            "--steps",
            str(STEPS),
            "--checkpoint-every",
            "10",
            "--sleep-per-step",
            "0.25",
        ],
        "working_dir": str(EXAMPLES),
        "environment": {"type": "venv", "path": str(TORCH_VENV)},
        "resources": {
            "nodes": 2,
            "tasks_per_node": 2,
            "cpus_per_task": 1,
            "memory": "2G",
            "time_limit": 20,
        },
        "distributed": {"launcher": "none"},
        "restart_policy": {"max_restarts": 3, "retry_on": ["node_failure"], "backoff_seconds": 0},
    }


def final_result(text: str) -> dict:
    lines = [line for line in text.splitlines() if line.startswith('{"final_step"')]
    assert lines, text[-2000:]
    return json.loads(lines[-1])


def checkpoint_step(job) -> int:
    match = re.search(r"step-(\d+)\.pt$", job.latest_checkpoint or "")
    return int(match.group(1)) if match else 0


def test_training_survives_a_node_failure_with_identical_results(acme, slurm_cluster):
    client = acme.client(Role.MEMBER)
    reference = drive(submit(client, acme.project, **training_spec())["id"], timeout=240)
    assert reference.state == "SUCCEEDED", output(reference)[-3000:]
    expected = final_result(output(reference))
    assert expected["final_step"] == STEPS and expected["world_size"] == 4
    assert "torus-metric step=1 loss=" in output(reference)

    job = submit(client, acme.project, **training_spec())
    running = drive(
        job["id"],
        timeout=180,
        condition=lambda j: j.state == "RUNNING" and checkpoint_step(j) >= 20,
    )
    failed_node = running.attempts.get(number=1).nodes[0]
    slurm("scontrol", "update", f"nodename={failed_node}", "state=down", "reason=torus-selfheal")
    healed = drive(job["id"], timeout=240)

    assert healed.state == "SUCCEEDED", (
        healed.state_reason,
        [
            (a.number, a.state, a.backend_state, a.signal, a.nodes, a.reason)
            for a in healed.attempts.order_by("number")
        ],
        slurm("sinfo", "-N", "-h", "-o", "%N %T %E"),
    )
    first, second = healed.attempts.order_by("number")
    assert first.state == AttemptState.NODE_FAIL and failed_node in first.nodes
    assert second.state == AttemptState.SUCCEEDED
    assert failed_node not in second.nodes and second.excluded_nodes == [failed_node]
    resumed = re.search(r"resumed from (\S+) at step (\d+)", output(healed, 2))
    assert resumed and int(resumed.group(2)) >= 20
    assert second.resume_from == resumed.group(1)
    result = final_result(output(healed, 2))
    assert result["final_step"] == expected["final_step"]
    assert result["final_loss"] == pytest.approx(expected["final_loss"], rel=1e-9, abs=0)
    assert result["param_checksum"] == pytest.approx(expected["param_checksum"], rel=1e-9)
    timeline = [e.to_state for e in healed.events.order_by("created_at")]
    assert timeline[-5:] == ["RESTARTING", "QUEUED", "SUBMITTED", "RUNNING", "SUCCEEDED"]
