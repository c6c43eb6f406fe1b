"""What the load test needs outside Locust's own clients: the demo tenants' tokens, seed jobs to
browse, live jobs to follow, and the cleanup of what a run submitted.

Standard library only (urllib over TLS with the proxy's CA), so it runs the same under gevent's
monkey-patching (the locustfile) and in plain Python (run.py). Never imports Django.
"""

import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VAR = Path(os.environ.get("TORUS_VAR_DIR", ROOT / ".var"))
HOST = os.environ.get("LOAD_HOST", "https://127.0.0.1:8443")
CA = os.environ.get("LOAD_CA", str(VAR / "run" / "proxy" / "site.pem.crt"))
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}
ACTIVE = "PENDING,QUEUED,SUBMITTED,RUNNING,RESTARTING"
SEED_LABEL = ("bench", "load-seed")  # lasting jobs with logs and metrics, kept between runs
SEED_JOBS = 8  # per tenant
RUN_LABEL = "load-run"  # every job a run submits: load-run=<run id>; cancelled at its end

# A training-like job: 300 lines (epochs, losses, a few stderr warnings) and 30 metric points.
SEED_SCRIPT = r"""
for i in $(seq 1 300); do
  echo "epoch $((i / 30)) step $i loss 0.$((RANDOM % 1000)) lr 3e-4 grad_norm 1.$((RANDOM % 100))"
  if ((i % 10 == 0)); then
    echo "torus-metric step=$i loss=0.$((RANDOM % 1000)) samples_per_sec=$((900 + RANDOM % 200))"
  fi
  if ((i % 97 == 0)); then echo "NCCL WARN timeout waiting for rank $((i % 4))" >&2; fi
done
echo "checkpoint saved; training finished"
"""
# A long job that prints a line and a metric point a second: what researchers follow live.
LIVE_SCRIPT = r"""
for i in $(seq 1 {seconds}); do
  echo "live step $i loss 0.$((RANDOM % 1000)) throughput $((900 + RANDOM % 200)) samples/s"
  echo "torus-metric step=$i loss=0.$((RANDOM % 1000))"
  sleep 1
done
"""


def log(msg: str) -> None:
    sys.stderr.write(f"[load {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=CA)


def demo() -> dict:
    """The seeded tenants (`make seed` writes .var/demo.json): tokens by role, the project."""
    path = VAR / "demo.json"
    if not path.is_file():
        sys.exit(f"no {path}: run `make seed` first")
    data = json.loads(path.read_text())
    tenants = []
    for tenant in data["tenants"]:
        tokens = {user["role"]: user["token"] for user in tenant["users"]}
        tenants.append(
            {
                "slug": tenant["slug"],
                "id": tenant["id"],
                "project": tenant["project"]["id"],
                "tokens": tokens,
            }
        )
    return {"tenants": tenants}


class ApiError(RuntimeError):
    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status


def call(token: str, method: str, path: str, body: dict | None = None, timeout: float = 30.0):
    """One API request; the decoded JSON (None for an empty body). Raises ApiError on >= 400."""
    url = path if path.startswith("https://") else HOST + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (our own host)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=ssl_context()) as response:  # noqa: S310
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = f"{method} {path}: {exc.code} {exc.read()[:300]!r}"
        raise ApiError(detail, status=exc.code) from exc
    return json.loads(raw) if raw else None


def jobs(token: str, **params) -> list[dict]:
    """Every job the token sees with these filters (all pages)."""
    url = "/api/v1/jobs/?" + urllib.parse.urlencode({"page_size": 500, **params})
    found = []
    while url:
        page = call(token, "GET", url)
        found.extend(page["results"])
        url = page["next"]
    return found


def submit(token: str, project: str, name: str, command, labels: dict, time_limit: int = 1):
    spec = {
        "project": project,
        "name": name,
        "command": command,
        "labels": labels,
        "resources": {"gpus_per_node": 0, "time_limit": time_limit},
    }
    return call(token, "POST", "/api/v1/jobs/", spec)


def wait_terminal(token: str, ids: list[str], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while True:
        states = {i: call(token, "GET", f"/api/v1/jobs/{i}/")["state"] for i in ids}
        if all(s in TERMINAL for s in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(2)


def prepare(run_id: str, live_seconds: int, live_jobs: int = 2) -> dict:
    """The context the locustfile reads: tokens, projects, seed job ids, live job ids.

    Seed jobs (label bench=load-seed, SEED_JOBS a tenant) are made once and kept: they are the
    finished jobs researchers browse, search and read metrics of. Live jobs (live_jobs a
    tenant, labelled with the run) print a line a second for live_seconds, so that followers
    get live lines; the run's cleanup cancels them.
    """
    context = demo()
    context["run_id"] = run_id
    context["host"] = HOST
    context["ca"] = CA
    for tenant in context["tenants"]:
        owner = tenant["tokens"]["owner"]
        key, value = SEED_LABEL
        seeds = [
            j
            for j in jobs(owner, project=tenant["project"], label=f"{key}={value}")
            if j["state"] == "SUCCEEDED"
        ]
        made = []
        for n in range(len(seeds), SEED_JOBS):
            made.append(
                submit(owner, tenant["project"], f"load-seed-{n}", SEED_SCRIPT, {key: value})["id"]
            )
        if made:
            log(f"{tenant['slug']}: {len(made)} seed jobs submitted; waiting for them to finish")
            states = wait_terminal(owner, made, timeout=180)
            log(f"{tenant['slug']}: seed jobs {sorted(states.values())}")
            seeds = [
                j
                for j in jobs(owner, project=tenant["project"], label=f"{key}={value}")
                if j["state"] == "SUCCEEDED"
            ]
        tenant["seed_jobs"] = [j["id"] for j in seeds]
        tenant["live_jobs"] = [
            start_live(tenant, f"load-live-{n}", run_id, live_seconds) for n in range(live_jobs)
        ]
    log(f"live jobs: {[t['live_jobs'] for t in context['tenants']]}")
    return context


def start_live(tenant: dict, name: str, run_id: str, seconds: int) -> str:
    """A live job that is RUNNING. Tries the member's, the admin's, then the owner's token:
    on a machine shared with test suites, a job can fail at launch when the directory's
    groups were rewritten underneath the platform (bench/results/history/load.json)."""
    script = LIVE_SCRIPT.replace("{seconds}", str(seconds))
    minutes = max(2, seconds // 60 + 2)
    job_id = ""
    for role in ("member", "admin", "owner"):
        token = tenant["tokens"][role]
        job_id = submit(token, tenant["project"], name, script, {RUN_LABEL: run_id}, minutes)["id"]
        deadline = time.monotonic() + 30
        state = "QUEUED"
        while state not in TERMINAL and state != "RUNNING" and time.monotonic() < deadline:
            time.sleep(1)
            state = call(token, "GET", f"/api/v1/jobs/{job_id}/")["state"]
        if state == "RUNNING":
            return job_id
        detail = call(token, "GET", f"/api/v1/jobs/{job_id}/")
        log(f"{tenant['slug']}: live job as {role} is {state} ({detail['state_reason']})")
    return job_id


def cleanup(context: dict, timeout: float = 180.0) -> dict:
    """Cancel every unfinished job of the run; wait until all are terminal; count them."""
    run_id = context["run_id"]
    label = f"{RUN_LABEL}={run_id}"
    cancelled = ended_meanwhile = 0
    cancel_errors: list[str] = []
    for tenant in context["tenants"]:
        owner = tenant["tokens"]["owner"]
        for job in jobs(owner, label=label, state=ACTIVE):
            try:
                call(owner, "POST", f"/api/v1/jobs/{job['id']}/cancel/", {})
                cancelled += 1
            except ApiError as exc:
                if exc.status == 409:  # it ended between the listing and the cancel
                    ended_meanwhile += 1
                else:
                    cancel_errors.append(str(exc)[:200])
    deadline = time.monotonic() + timeout
    while True:
        left = sum(
            len(jobs(t["tokens"]["owner"], label=label, state=ACTIVE)) for t in context["tenants"]
        )
        if not left or time.monotonic() > deadline:
            break
        time.sleep(2)
    by_state: dict[str, int] = {}
    by_tenant: dict[str, int] = {}
    for tenant in context["tenants"]:
        every = jobs(tenant["tokens"]["owner"], label=label)
        by_tenant[tenant["slug"]] = len(every)
        for job in every:
            by_state[job["state"]] = by_state.get(job["state"], 0) + 1
    return {
        "jobs_of_the_run": sum(by_tenant.values()),
        "by_tenant": by_tenant,
        "by_state": dict(sorted(by_state.items())),
        "cancelled_at_end": cancelled,
        "ended_before_the_cancel": ended_meanwhile,
        "cancel_errors": cancel_errors[:10],
        "unfinished_after_cleanup": left,
    }


def slurm_queue() -> dict | None:
    """Jobs slurmctld holds (pending/running, and all records), or None without Slurm here."""
    env_file = VAR / "slurm" / "env"
    if not env_file.is_file():
        return None
    conf = re.search(r"^(?:export\s+)?SLURM_CONF=(.+)$", env_file.read_text(), re.M)
    if not conf:
        return None
    env = {**os.environ, "SLURM_CONF": conf.group(1).strip()}
    env.pop("SLURM_JWT", None)

    def count(*args: str) -> int | None:
        try:
            out = subprocess.run(  # noqa: S603
                ["squeue", "-h", "-o", "%i", *args],  # noqa: S607
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return len(out.split())

    return {"active": count(), "records": count("-t", "all")}
