"""End to end: the example PyTorch training job on the real Slurm cluster with the shipper
running; its lines and metrics stream over the websocket while it trains, and afterwards its
lines are searchable and its loss and throughput are served as series."""

import re
import time
from pathlib import Path

from apps.jobs.models import Job
from apps.tenancy.models import Role
from tests.jobs.test_self_healing import final_result, training_spec
from torus import Client

STEPS = 25


def test_example_training_run_is_streamed_searchable_and_charted(
    asgi_server, acme, control_loop, shipper_loop
):
    spec = training_spec()
    spec["command"] = ["python", "train_ddp.py", "--steps", str(STEPS)]
    spec["command"] += ["--checkpoint-every", "10", "--sleep-per-step", "0.1"]
    client = Client(url=asgi_server.url, token=acme.tokens[Role.MEMBER])
    job = client.submit({"project": str(acme.project.id), **spec})

    messages: list[dict] = []
    streamed = [
        line["message"]
        for line in client.follow_logs(
            job["id"], streams=("stdout",), tail=2000, on_message=messages.append
        )
    ]

    done = Job.objects.get(pk=job["id"])
    assert done.state == "SUCCEEDED", done.state_reason
    written = Path(done.attempts.get(number=1).stdout_path).read_text().splitlines()
    assert streamed == written  # every line, in order, once
    result = final_result("\n".join(streamed))
    assert result["final_step"] == STEPS and result["world_size"] == 4

    states = [m["state"] for m in messages if m["type"] == "state"]
    assert states[-2:] == ["RUNNING", "SUCCEEDED"]
    live_points = [p for m in messages if m["type"] == "metrics" for p in m["points"]]
    assert {p["step"] for p in live_points if p["name"] == "loss"} == set(range(1, STEPS + 1))
    assert {p["name"] for p in live_points} == {"loss", "samples_per_sec"}

    series = client.metrics(job["id"])
    assert [p["step"] for p in series["loss"]] == list(range(1, STEPS + 1))
    assert all(p["value"] > 0 for p in series["samples_per_sec"])
    losses = {p["step"]: p["value"] for p in series["loss"]}
    printed = re.search(rf"torus-metric step={STEPS} loss=(\S+)", "\n".join(written))
    assert losses[STEPS] == float(printed.group(1))

    # A line is searchable from Elasticsearch's next refresh (every second): the last ones
    # shown live may be found up to a second later (a CI run searched before it).
    wanted, deadline = [line for line in written if "final_step" in line], time.monotonic() + 10
    while True:
        found = client.search_logs('"final_step"', project=str(acme.project.id))
        if [hit["message"] for hit in found["hits"]] == wanted or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [hit["message"] for hit in found["hits"]] == wanted
    found = client.search_logs("checkpoint saved", job=job["id"], size=100)
    assert found["total"] == sum("checkpoint saved" in line for line in written) == 3
