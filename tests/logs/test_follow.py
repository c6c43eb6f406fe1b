"""`torus logs ID -f` and Client.follow_logs over the websocket, against the whole ASGI app
served by uvicorn, real Slurm jobs, the shipper and the Redis channel layer."""

import time

from apps.tenancy.models import Role
from tests.sdk.cli import run_cli
from torus import Client, TorusError

TICKER = "for i in $(seq 1 40); do echo tick $i; echo warn $i >&2; sleep 0.1; done"


def _submit(client: Client, project, command: str, name: str = "ticker") -> dict:
    return client.submit(
        {"project": str(project.id), "name": name, "command": ["bash", "-c", command]}
    )


def _wait_running(client: Client, job_id: str) -> None:
    deadline = time.monotonic() + 60
    while client.job(job_id)["state"] != "RUNNING":
        assert time.monotonic() < deadline, client.job(job_id)
        time.sleep(0.2)


def test_cli_follows_a_job_to_its_end_over_the_websocket(
    asgi_server, acme, control_loop, shipper_loop
):
    client = Client(url=asgi_server.url, token=acme.tokens[Role.MEMBER])
    job = _submit(client, acme.project, TICKER)
    env = {"TORUS_URL": asgi_server.url, "TORUS_TOKEN": acme.tokens[Role.VIEWER]}
    followed = run_cli("logs", job["id"], "-f", env=env)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "".join(f"tick {i}\n" for i in range(1, 41))
    assert f"torus: job {job['id']} is SUCCEEDED" in followed.stderr
    stderr_only = run_cli("logs", job["id"], "-f", "--stderr", "--tail", "5", env=env)
    assert stderr_only.stdout == "".join(f"warn {i}\n" for i in range(36, 41))


def test_sdk_follows_live_lines_and_states_then_cancel(
    asgi_server, acme, control_loop, shipper_loop
):
    client = Client(url=asgi_server.url, token=acme.tokens[Role.MEMBER])
    job = _submit(client, acme.project, "for i in $(seq 1 600); do echo tick $i; sleep 0.1; done")
    _wait_running(client, job["id"])
    states, seen = [], []
    for line in client.follow_logs(job["id"], on_message=states.append):
        seen.append(line["message"])
        if line["message"] == "tick 5":
            client.cancel(job["id"])
    assert seen[:5] == [f"tick {i}" for i in range(1, 6)]
    assert seen == [f"tick {i}" for i in range(1, len(seen) + 1)]  # in order, none twice
    assert [m["state"] for m in states if m["type"] == "state"][-1] == "CANCELLED"


def test_following_another_tenants_job_is_a_not_found(asgi_server, acme, globex):
    from tests.factories import make_job

    job = make_job(project=acme.project, user=acme.users[Role.MEMBER], state="RUNNING")
    client = Client(url=asgi_server.url, token=globex.tokens[Role.OWNER])
    try:
        next(client.follow_logs(str(job.pk)))
    except TorusError as exc:
        assert exc.status == 404
    else:
        raise AssertionError("another tenant's job was followed")
    env = {"TORUS_URL": asgi_server.url, "TORUS_TOKEN": globex.tokens[Role.OWNER]}
    refused = run_cli("logs", str(job.pk), "-f", env=env)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
