"""A soak with faults, accounted like Jepsen: two of every portal tier (tests/stack.py) on the
real services run a mixed workload (researchers submitting jobs that print log lines and
metrics through the TLS proxy, others listing jobs and searching logs) while a web server, a
worker, a shipper, beat, the Elasticsearch node, slurmctld and a slurmd (FAULTS) are each
SIGKILLed once every three minutes, in random order, and started again. At the end:

- every job the API accepted (201) is in the database once, and nothing else is: a request
  cut by a kill (no answer) may have created its job or not, never two;
- every job ran to SUCCEEDED, each attempt was at most one run of a Slurm job, and each job's
  script ran to its end exactly once (none lost, none run twice);
- every line the attempts wrote is one document in Elasticsearch, and every metric line one
  stored point.

TORUS_SOAK_SECONDS sets the workload's length (180 in `make test`; the figures of a longer
run are in bench/README.md)."""

import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from apps.jobs.models import Job, JobAttempt
from apps.jobs.reconcile import ENDED_BY_ITS_STATUS
from apps.logs.metrics import parse_metric_line
from apps.logs.models import JobMetric
from apps.logs.usage import STREAM as USAGE
from apps.tenancy.models import Role
from tests.jobs.conftest import slurm
from tests.logs.conftest import count
from tests.stack import ROOT, Stack, portal_env

SECONDS = int(os.environ.get("TORUS_SOAK_SECONDS", "180"))
SERVICES = ROOT / "platform" / "services"
# 40 plain lines and 20 metric lines on stdout, 5 on stderr, over about two seconds
JOB_SCRIPT = (
    'for i in $(seq 1 20); do echo "soak $SLURM_JOB_ID line $i"; '
    'echo "torus-metric step=$i loss=0.$i"; echo "more $i"; sleep 0.1; done; '
    'for i in 1 2 3 4 5; do echo "warn $i" >&2; done'
)
# TORUS_SOAK_FAULTS: a comma-separated choice among these (default: all). slurmctld and a
# slurmd are started again by `platform/services/up slurm`, as a supervisor would.
FAULTS = ("web", "worker", "shipper", "beat", "elasticsearch", "slurmctld", "slurmd")
FAULTS = tuple(os.environ.get("TORUS_SOAK_FAULTS", ",".join(FAULTS)).split(","))
# Slurm's record of a run that ended well: COMPLETED. With slurmctld SIGKILLed it may also be
# what the controller made of a job whose end it had not saved when it came back: NODE_FAIL or
# REQUEUED ("missing from batch node"), CANCELLED (the control pass cancelled that ghost), or
# no record at all (forgotten whole); the job's own output then says it ran to its end.
SLURM_CTLD_KILLED = "slurmctld" in FAULTS
ROUNDS = max(1, SECONDS // 180)  # each fault once per three minutes of the run

pytestmark = pytest.mark.django_db(transaction=True)


class Ledger:
    """What the clients saw: ids of jobs accepted, names of requests that got no answer."""

    def __init__(self) -> None:
        self.accepted: dict[str, str] = {}  # job id -> name
        self.unknown: set[str] = set()  # names whose request was cut
        self.refused: list[tuple[int, str]] = []  # 4xx: a bug here
        self.reads = Counter()
        self.lock = threading.Lock()


def _submit_loop(stack, ledger, *, who, token, project, stop) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=stack.base, verify=stack.verify, headers=headers) as api:
        n = 0
        while not stop.is_set():
            n += 1
            name = f"soak-{who}-{n}"
            body = {"project": str(project.pk), "name": name}
            body["command"] = ["bash", "-c", JOB_SCRIPT]
            try:
                response = api.post("/api/v1/jobs/", json=body, timeout=30)
            except httpx.HTTPError:
                response = None
            with ledger.lock:
                if response is not None and response.status_code == 201:
                    ledger.accepted[response.json()["id"]] = name
                elif response is None or response.status_code >= 500:
                    ledger.unknown.add(name)
                else:
                    ledger.refused.append((response.status_code, response.text[:300]))
            stop.wait(0.7)


def _read_loop(stack, ledger, *, token, project, stop) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    paths = [
        f"/api/v1/jobs/?project={project.pk}",
        f"/api/v1/logs/search/?q=soak&project={project.pk}",
    ]
    with httpx.Client(base_url=stack.base, verify=stack.verify, headers=headers) as api:
        while not stop.is_set():
            for path in paths:
                kind = path.split("?")[0]
                try:
                    status = api.get(path, timeout=30).status_code
                except httpx.HTTPError:
                    status = "no answer"
                with ledger.lock:
                    ledger.reads[(kind, status)] += 1
            stop.wait(0.5)


def _pid_file(path: Path) -> int:
    return int(path.read_text().split()[0])


NODES = ("n1", "n2", "n3")


def _resume_nodes() -> None:
    """What an operator does after a crash: nodes slurmctld marked down or drained go back
    to work (`platform/services/up` waits for every node usable)."""
    for node in NODES:
        slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)


def _restart(*command, before=None) -> None:
    """Start a service again as a supervisor would (systemd's Restart=on-failure): a start
    that fails right after the kill (a port not yet free) is tried again; `before` runs
    ahead of each try."""
    for _ in range(5):
        if before:
            before()
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            return
        time.sleep(3)
    raise AssertionError(f"{command} failed five times: {done.stderr[-2000:]}")


def _inject(stack, fault: str, rng) -> None:
    """SIGKILL one part, then start it again."""
    n = rng.choice((1, 2))
    if fault in ("web", "worker", "shipper", "beat"):
        stack.kill(f"{fault}{n}")
        time.sleep(rng.uniform(1, 4))
        stack.start(f"{fault}{n}")
    elif fault == "slurmctld":
        os.kill(_pid_file(ROOT / ".var/run/slurm-slurmctld.pid"), signal.SIGKILL)
        time.sleep(rng.uniform(1, 4))
        _restart(SERVICES / "up", "slurm", before=_resume_nodes)
    elif fault == "slurmd":
        node = rng.choice(NODES)
        os.kill(_pid_file(ROOT / f".var/run/slurm-slurmd-{node}.pid"), signal.SIGKILL)
        time.sleep(rng.uniform(1, 4))
        _restart(SERVICES / "up", "slurm", before=_resume_nodes)
    else:
        es = SERVICES / "components" / "elasticsearch"
        os.kill(_pid_file(ROOT / ".var/elasticsearch/run/elasticsearch.pid"), signal.SIGKILL)
        time.sleep(rng.uniform(1, 4))
        _restart(es, "start")
        _restart(es, "wait")


def _lines(attempt: JobAttempt) -> tuple[int, int]:
    """(lines, metric lines) the attempt wrote, from its files."""
    lines = metrics = 0
    for path in (attempt.stdout_path, attempt.stderr_path):
        if path and Path(path).exists():
            for line in Path(path).read_text(errors="replace").splitlines():
                lines += 1
                metrics += parse_metric_line(line) is not None
    return lines, metrics


def _stderr(attempt: JobAttempt) -> str:
    path = Path(attempt.stderr_path) if attempt.stderr_path else None
    return path.read_text(errors="replace") if path and path.exists() else ""


def _ran_to_the_end(attempt: JobAttempt) -> bool:
    """The script's last line is in its output, once: it ran to its end. (Slurm's stepd may
    add its own lines to the file after it.)"""
    return _stderr(attempt).splitlines().count("warn 5") == 1


def _forgotten(attempt: JobAttempt) -> bool:
    """Slurm lost the attempt's end (no record, or a requeue of a job that had ended); the
    exit status its launcher left ended it."""
    return SLURM_CTLD_KILLED and attempt.backend_state == ENDED_BY_ITS_STATUS


def _slurm_jobs(since: str) -> dict[str, list[str]]:
    """Slurm's accounting: tag (torus:<attempt>) -> the states of the runs of Slurm jobs with
    it. A job requeued then cancelled before it started again has a record that never ran."""
    # --duplicates: a slurmctld SIGKILLed loses the ids it gave since its last state save and
    # gives them again, and a requeued job has a record per run; without it sacct shows only
    # the newest record of an id
    out = slurm(
        "sacct", "-D", "-X", "-n", "-P", "-a", "-S", since, "-o", "JobID,Comment,State,Start"
    )
    tagged: dict[str, list[str]] = {}
    for line in out.splitlines():
        _, comment, state, start = line.split("|", 3)
        if comment.startswith("torus:") and start not in ("None", "Unknown"):
            tagged.setdefault(comment, []).append(state.split()[0])
    return tagged


def _wait_for(what: str, condition, *, timeout: float):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(1)
    return result


def _slurm_mismatches(attempts, since: str) -> list:
    """For a failure message: attempts whose Slurm records are not what they should be."""
    tagged = _slurm_jobs(since)
    return [
        (a.job.name, a.number, a.state, a.backend_id, tagged.get(a.tag))
        for a in attempts.exclude(backend_id="")
        if len(tagged.get(a.tag, [])) != 1
    ][:20]


def test_a_soak_with_every_tier_killed_loses_and_doubles_nothing(es, acme, slurm_cluster, tmp_path):
    rng = random.Random(os.environ.get("TORUS_SOAK_SEED", "soak"))
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    env = portal_env(
        TORUS_BEAT_LEASE_SECONDS="3",
        TORUS_SHIPPER_LEASE_SECONDS="3",
        TORUS_LOST_AFTER_SECONDS="30",
        TORUS_RECONCILE_SECONDS="1",
    )
    _resume_nodes()  # an earlier test may have left a node drained
    ledger, stop = Ledger(), threading.Event()
    kinds = ("web", "worker", "beat", "shipper")
    with Stack(tmp=tmp_path, env=env, scale=2, kinds=kinds) as stack:
        clients = [
            threading.Thread(target=loop, kwargs=kwargs, daemon=True)
            for loop, kwargs in [
                (_submit_loop, {"who": "m", "token": acme.tokens[Role.MEMBER]}),
                (_submit_loop, {"who": "a", "token": acme.tokens[Role.ADMIN]}),
                (_read_loop, {"token": acme.tokens[Role.VIEWER]}),
            ]
        ]
        for thread in clients:
            thread._kwargs.update(stack=stack, ledger=ledger, project=acme.project, stop=stop)
            thread.start()
        started = time.monotonic()
        faults = [fault for _ in range(ROUNDS) for fault in rng.sample(FAULTS, len(FAULTS))]
        try:
            for i, fault in enumerate(faults, 1):  # spread over the run, in random order
                time.sleep(max(0.0, started + i * SECONDS / (len(faults) + 1) - time.monotonic()))
                _inject(stack, fault, rng)
            time.sleep(max(0.0, started + SECONDS - time.monotonic()))
        finally:
            stop.set()
            for thread in clients:
                thread.join(timeout=60)
        jobs = Job.objects.filter(project=acme.project, name__startswith="soak-")
        _wait_for(
            "every job to end",
            lambda: not jobs.exclude(state__in=("SUCCEEDED", "FAILED", "CANCELLED")).exists(),
            timeout=300,
        )
        attempts = JobAttempt.objects.filter(job__in=jobs)
        _wait_for(
            "the shippers to ship every attempt",
            lambda: not attempts.filter(logs_shipped=False).exclude(stdout_path="").exists(),
            timeout=300,
        )
    print(f"soak: {len(ledger.accepted)} accepted, {len(ledger.unknown)} cut, faults {faults}")
    print(f"soak: reads {dict(ledger.reads)}")

    # the API's word against the database's
    assert not ledger.refused, ledger.refused[:5]
    names = Counter(jobs.values_list("name", flat=True))
    assert set(ledger.accepted) <= {str(pk) for pk in jobs.values_list("pk", flat=True)}
    assert [name for name, times in names.items() if times > 1] == []  # none twice
    assert set(names) <= set(ledger.accepted.values()) | ledger.unknown  # none made up
    assert len(ledger.accepted) > SECONDS // 2  # the workload went on through the faults

    # the database's word against Slurm's
    states = Counter(jobs.values_list("state", flat=True))
    assert states == {"SUCCEEDED": jobs.count()}, [
        (job.name, job.state, job.state_reason) for job in jobs.exclude(state="SUCCEEDED")[:5]
    ]

    # Slurm's accounting: every attempt that ended as it should is one run of a Slurm job. A
    # slurmctld SIGKILLed before it saved a job forgets it, accounting too, or requeues it: an
    # attempt that never ran came back as a later attempt; one that ran to its end ended by
    # the exit status its launcher left (ENDED_BY_ITS_STATUS), not run again. No job
    # completed twice.
    def slurm_agrees():
        tagged = _slurm_jobs(since)
        for attempt in attempts.exclude(backend_id=""):
            found = len(tagged.get(attempt.tag, []))
            if found > 1 or (
                found == 0 and attempt.state == "SUCCEEDED" and not _forgotten(attempt)
            ):
                return None
        return tagged

    # slurmdbd takes the newest records after the drain; on a busy CI machine it has taken
    # over 90 s (the database had every job SUCCEEDED, sacct not yet the two newest).
    try:
        tagged = _wait_for("Slurm's accounting", slurm_agrees, timeout=240)
    except AssertionError as exc:
        raise AssertionError(_slurm_mismatches(attempts, since)) from exc
    unknown = [a for a in attempts.exclude(backend_id="") if a.tag not in tagged]
    lost = [a for a in unknown if not _forgotten(a)]
    print(
        f"soak: {attempts.count()} attempts, {len(lost)} lost by Slurm and run again, "
        f"{len(unknown) - len(lost)} forgotten by Slurm after they ended, not run again"
    )
    for attempt in lost:
        assert attempt.job.attempts.filter(number__gt=attempt.number).exists(), attempt.pk
    for job in jobs.prefetch_related("attempts"):
        ran = {a.number: tagged[a.tag][0] for a in job.attempts.all() if a.tag in tagged}
        to_the_end = [a for a in job.attempts.all() if _ran_to_the_end(a)]
        assert len(to_the_end) == 1, (  # its script ran once, whole
            job.name,
            ran,
            {a.number: (a.state, a.backend_state, _stderr(a)[-300:]) for a in job.attempts.all()},
        )
        assert list(ran.values()).count("COMPLETED") <= 1, (job.name, ran)
        end = to_the_end[0]
        assert SLURM_CTLD_KILLED or ran[end.number] == "COMPLETED", (job.name, ran, end.number)

    # lines written = documents indexed; metric lines = stored points
    for attempt in attempts:
        lines, metric_lines = _lines(attempt)
        assert count(attempt=attempt) == lines, attempt.pk
        printed = JobMetric.objects.filter(attempt=attempt).exclude(stream=USAGE)
        assert printed.count() == metric_lines, attempt.pk  # beside the usage samples
