"""The container launcher (run here with bash, as a pod would) and the mapping from
Kubernetes objects to the platform's attempt states. No cluster needed."""

import base64
import json
import subprocess

import pytest

from apps.compute.backends import argv as launcher_argv
from apps.compute.backends.kubernetes import outcomes, pending
from apps.compute.backends.kubernetes.manifests import LAUNCHER

PRINT_RANKS = (
    "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'LOCAL_RANK',"
    " 'NODE_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')} | {'argv': sys.argv[1:]}))"
)


def b64(word: str) -> str:
    return base64.b64encode(word.encode()).decode()


def launch(env: dict) -> list[dict]:
    result = subprocess.run(
        ["/bin/bash", "-c", LAUNCHER, "torus-launcher"],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return sorted(
        (json.loads(line) for line in result.stdout.splitlines()), key=lambda r: r["RANK"]
    )


def test_ranks_from_the_completion_index_and_argv_as_data():
    argv = ["python3", "-c", PRINT_RANKS, "$(id)", "a b\nc", "--x=';rm -rf /'"]
    ranks = launch(
        {
            "TORUS_NNODES": "2",
            "TORUS_TASKS_PER_NODE": "2",
            "JOB_COMPLETION_INDEX": "1",
            "TORUS_MASTER_ADDR": "t-1-0.t-1.torus-acme.svc",
            "TORUS_MASTER_PORT": "23456",
            "TORUS_LAUNCHER": "none",
            "TORUS_ARGV": launcher_argv.encode(argv),
        }
    )
    assert [(r["RANK"], r["LOCAL_RANK"], r["NODE_RANK"]) for r in ranks] == [
        ("2", "0", "1"),
        ("3", "1", "1"),
    ]
    assert {r["WORLD_SIZE"] for r in ranks} == {"4"}
    assert {r["MASTER_ADDR"] for r in ranks} == {"t-1-0.t-1.torus-acme.svc"}
    assert {r["MASTER_PORT"] for r in ranks} == {"23456"}
    assert ranks[0]["argv"] == ["$(id)", "a b\nc", "--x=';rm -rf /'"]  # never evaluated


def test_single_node_script():
    script = f"python3 -c {json.dumps(PRINT_RANKS)}"
    (rank,) = launch({"TORUS_SCRIPT_B64": b64(script), "TORUS_LAUNCHER": "none"})
    assert rank["RANK"] == "0" and rank["WORLD_SIZE"] == "1" and rank["MASTER_ADDR"] == "127.0.0.1"


def test_datasets_from_the_stager_next_to_the_plan(tmp_path):
    """The launcher runs the stager the platform put beside the plan, then exports its
    TORUS_DATASET_* lines, and nothing else the env file holds."""
    plan = tmp_path / "datasets.json"
    plan.write_text("{}")
    (tmp_path / "stager.py").write_text(
        "import os, sys, pathlib\n"
        "node = os.environ['HOSTNAME']\n"
        "pathlib.Path(sys.argv[1]).with_name(f'datasets-{node}.env').write_text(\n"
        "    'TORUS_DATASET_TRAIN=/t/acme/vision/datasets/imgs/1\\n'\n"
        "    'TORUS_DATASETS=TRAIN\\nLD_PRELOAD=/evil.so\\n')\n"
    )
    show = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ("
    show += "'TORUS_DATASET_TRAIN', 'TORUS_DATASETS', 'LD_PRELOAD')} | {'RANK': '0'}))"
    (found,) = launch(
        {
            "HOSTNAME": "t-1-0-abcde",
            "TORUS_DATASETS_PLAN": str(plan),
            "TORUS_LAUNCHER": "none",
            "TORUS_ARGV": launcher_argv.encode(["python3", "-c", show]),
        }
    )
    assert found["TORUS_DATASET_TRAIN"] == "/t/acme/vision/datasets/imgs/1"
    assert found["TORUS_DATASETS"] == "TRAIN"
    assert found["LD_PRELOAD"] is None


def test_a_failing_task_fails_the_pod():
    env = {
        "TORUS_TASKS_PER_NODE": "2",
        "TORUS_LAUNCHER": "none",
        "TORUS_SCRIPT_B64": b64('[ "$LOCAL_RANK" = 1 ] && exit 7; exit 0'),
    }
    result = subprocess.run(
        ["/bin/bash", "-c", LAUNCHER, "torus-launcher"], env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 7


# -- outcomes ---------------------------------------------------------------------------------


def job(**overrides) -> dict:
    base = {
        "ns": "torus-acme",
        "name": "t-a",
        "uid": "u",
        "tag": "torus:a",
        "tenant": "acme",
        "created": "2026-12-01T00:00:00Z",
        "suspended": False,
        "nodes": 1,
        "active": 1,
        "ready": 0,
        "succeeded": 0,
        "failed": 0,
        "start": None,
        "end": None,
        "conditions": [],
    }
    return base | overrides


def pod(**overrides) -> dict:
    base = {
        "ns": "torus-acme",
        "name": "t-a-x",
        "attempt": "a",
        "index": 0,
        "node": "kwok-gpu-0",
        "phase": "Running",
        "reason": "",
        "deleting": False,
        "unscheduled": "",
        "disruption": "",
        "exit_code": None,
        "signal": None,
        "term_reason": "",
        "waiting": "",
        "start": "2026-12-01T00:00:01Z",
        "end": None,
    }
    return base | overrides


def failed(reason: str, message: str = "") -> list[dict]:
    return [{"type": "Failed", "status": "True", "reason": reason, "message": message}]


@pytest.mark.parametrize(
    ("job_kw", "pods", "lost", "retryable", "word", "state"),
    [
        ({"suspended": True}, [], set(), (), "Queued", "SUBMITTED"),
        ({}, [pod(phase="Pending", node="", unscheduled="0/4")], set(), (), "Pending", "SUBMITTED"),
        ({}, [pod()], set(), (), "Running", "RUNNING"),
        # Pods done, the Job's Complete condition not yet set: still running, not waiting.
        ({}, [pod(phase="Succeeded", exit_code=0)], set(), (), "Running", "RUNNING"),
        (
            {"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]},
            [], set(), (), "Running", "RUNNING",
        ),
        (
            {"conditions": [{"type": "Complete", "status": "True"}]},
            [pod(phase="Succeeded", exit_code=0)],
            set(), (), "Succeeded", "SUCCEEDED",
        ),
        (
            {"conditions": failed("BackoffLimitExceeded")},
            [pod(phase="Failed", exit_code=3, term_reason="Error")],
            set(), (), "Failed", "FAILED",
        ),
        ({"conditions": failed("DeadlineExceeded")}, [], set(), (), "DeadlineExceeded", "TIMEOUT"),
        (
            {"conditions": failed("BackoffLimitExceeded")},
            [pod(phase="Failed", exit_code=137, term_reason="OOMKilled")],
            set(), (), "OOMKilled", "FAILED",
        ),
        ({}, [pod()], {"kwok-gpu-0"}, (), "NodeLost", "NODE_FAIL"),
        ({}, [pod(disruption="DeletionByPodGC")], set(), (), "NodeLost", "NODE_FAIL"),
        ({}, [pod(disruption="EvictionByEvictionAPI")], set(), (), "Evicted", "NODE_FAIL"),
        ({}, [pod(disruption="PreemptionByScheduler")], set(), (), "Preempted", "PREEMPTED"),
        ({}, [pod(phase="Failed", reason="Evicted")], set(), (), "Evicted", "NODE_FAIL"),
        (
            {"conditions": failed("BackoffLimitExceeded")},
            [pod(phase="Failed", exit_code=75)],
            set(), (75,), "NodeLost", "NODE_FAIL",
        ),
    ],
)  # fmt: skip
def test_outcomes(job_kw, pods, lost, retryable, word, state):
    record = outcomes.summarise(
        job=job(**job_kw), pods=pods, workload=None, lost_nodes=lost, retryable=retryable
    )
    assert record["state"] == word
    assert outcomes.attempt_state(word) == state
    found = outcomes.backend_job(record)
    assert found.backend_id == "torus-acme/t-a" and found.tag == "torus:a"
    if state not in ("SUBMITTED", "RUNNING"):
        assert found.ended_at is not None


def test_kueue_preemption_and_waiting_reason():
    workload = {
        "ns": "torus-acme",
        "name": "job-t-a",
        "job": "t-a",
        "queue": "torus",
        "priority": 0,
        "created": "2026-12-01T00:00:00Z",
        "conditions": {
            "QuotaReserved": {
                "status": "False",
                "reason": "Pending",
                "message": "couldn't assign flavors to pod set main: insufficient quota",
            }
        },
    }
    record = outcomes.summarise(
        job=job(suspended=True), pods=[], workload=workload, lost_nodes=set()
    )
    assert (record["state"], record["reason"]) == (
        "Queued",
        workload["conditions"]["QuotaReserved"]["message"],
    )
    assert pending.waiting_message(state="Queued", reason=record["reason"], position=3) == (
        "waiting in Kueue: couldn't assign flavors to pod set main: insufficient quota (position 3)"
    )
    evicted = workload | {
        "conditions": {"Evicted": {"status": "True", "reason": "Preempted", "message": "by t-b"}}
    }
    record = outcomes.summarise(
        job=job(suspended=True), pods=[], workload=evicted, lost_nodes=set()
    )
    assert record["state"] == "Preempted"
    assert (
        pending.waiting_message(
            state="Pending",
            reason="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            position=None,
        )
        == "waiting in Kubernetes: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    )


def test_positions_follow_kueue_order():
    def wl(name, created, priority=0):
        return {
            "ns": "n",
            "name": f"w-{name}",
            "job": name,
            "priority": priority,
            "created": created,
            "conditions": {},
        }

    queue = [
        wl("c", "2026-12-01T00:00:03Z"),
        wl("a", "2026-12-01T00:00:01Z"),
        wl("b", "2026-12-01T00:00:02Z"),
        wl("hi", "2026-12-01T00:00:09Z", priority=10),
    ]
    assert pending.positions({"acme": queue}) == {
        ("n", "hi"): 1,
        ("n", "a"): 2,
        ("n", "b"): 3,
        ("n", "c"): 4,
    }
