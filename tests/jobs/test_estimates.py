"""Expected starts (apps/jobs/estimates.py): from past runs, through quotas and the nodes'
health, calibrated on past misses, in the API; and on the real Slurm cluster."""

import math
import re
from datetime import datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.compute.models import Node
from apps.core import telemetry
from apps.core.generations import redis_client
from apps.jobs import estimate_learning as learning
from apps.jobs import runtimes
from apps.jobs.estimate_store import SMOOTH_SECONDS as S
from apps.jobs.estimate_store import store_key as _key
from apps.jobs.estimates import estimates_refresh
from apps.jobs.models import AttemptState, Job
from apps.quotas.models import Quota
from apps.tenancy.models import Role
from tests.factories import ClusterFactory, make_job
from tests.jobs.conftest import drive, submit
from tests.jobs.test_admission import post
from tests.sdk.cli import run_cli

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_history():
    runtimes.forget()  # the process keeps the history a minute; these tests write it
    yield
    runtimes.forget()


def at(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def past_runs(world, cluster, *, name: str, seconds: float, count: int = 3) -> None:
    now = timezone.now()
    for n in range(count):
        job = make_job(
            project=world.project,
            user=world.users[Role.MEMBER],
            state="SUCCEEDED",
            cluster=cluster,
            name=name,
        )
        ended = now - timedelta(hours=n + 1)
        job.attempts.create(
            number=1,
            state=AttemptState.SUCCEEDED,
            started_at=ended - timedelta(seconds=seconds),
            ended_at=ended,
        )


def running(world, cluster, *, name: str, gpus_per_node: int, nodes: int, ran: float) -> Job:
    job = make_job(
        project=world.project,
        user=world.users[Role.MEMBER],
        state="RUNNING",
        cluster=cluster,
        name=name,
        gpus_per_node=gpus_per_node,
        resources={"gpus_per_node": gpus_per_node, "nodes": nodes, "time_limit": 120},
    )
    job.attempts.create(
        number=1,
        state=AttemptState.RUNNING,
        started_at=timezone.now() - timedelta(seconds=ran),
    )
    return job


def queued(world, cluster, *, state: str = "QUEUED", role=Role.MEMBER, **spec) -> Job:
    """A waiting job of `world` on `cluster` (rows only)."""
    return make_job(
        project=world.project, user=world.users[role], state=state, cluster=cluster, **spec
    )


def behind_a_trained_blocker(world, cluster) -> Job:
    """Three past 600 s runs of "train"; one running 100 s on the whole partition; a 4-GPU
    "train" waiting behind it (500 s away)."""
    past_runs(world, cluster, name="train", seconds=600)
    running(world, cluster, name="train", gpus_per_node=4, nodes=2, ran=100)
    return queued(world, cluster, name="train", gpus_per_node=4)


def detail(world, job) -> dict:
    response = world.client(Role.VIEWER).get(reverse("job-detail", kwargs={"pk": job.pk}))
    assert response.status_code == 200
    return response.json()


def test_a_waiting_job_starts_when_the_running_one_is_expected_to_end(acme, cluster):
    waiting = behind_a_trained_blocker(acme, cluster)
    blocker = Job.objects.get(state="RUNNING", cluster=cluster)
    now = timezone.now()
    counts = estimates_refresh(cluster_id=cluster.pk, now=now)
    assert counts["waiting"] == 1 and counts["estimated"] == 1
    expected = detail(acme, waiting)["expected_start"]
    # the blocker ran 100 s of the 600 its three past runs took: 500 s left, not its
    # 120-minute limit; uncalibrated, the range is half to twice the wait (+S smoothing)
    clock = now.timestamp()
    assert at(expected["p50"]) == pytest.approx(clock + 500, abs=1)
    assert at(expected["p10"]) == pytest.approx(clock + (500 + S) * 0.5 - S, abs=1)
    assert at(expected["p90"]) == pytest.approx(clock + (500 + S) * 2 - S, abs=1)
    assert "3 past runs of this job's name" in expected["basis"]
    assert "uncalibrated" in expected["basis"]
    assert expected["cannot_start"] == ""
    assert detail(acme, blocker)["expected_start"] is None
    listed = acme.client(Role.VIEWER).get(reverse("job-list")).json()["results"]
    by_id = {row["id"]: row for row in listed}
    assert by_id[str(waiting.pk)]["expected_start"] == expected


def test_without_past_runs_the_time_limit_is_the_run_time(acme, cluster):
    running(acme, cluster, name="fresh", gpus_per_node=4, nodes=2, ran=60)
    waiting = queued(acme, cluster, state="PENDING")
    now = timezone.now()
    estimates_refresh(cluster_id=cluster.pk, now=now)
    expected = detail(acme, waiting)["expected_start"]
    assert at(expected["p50"]) == pytest.approx(now.timestamp() + 120 * 60 - 60, abs=1)
    assert "the time limit" in expected["basis"]


@pytest.mark.parametrize("lends", [False, True])
def test_where_the_cluster_lends_a_job_over_its_quota_borrows_idle_gpus(acme, cluster, lends):
    cluster.config = {**(cluster.config or {}), "quota_borrowing": lends}
    cluster.save(update_fields=["config"])
    Quota.objects.create(tenant=acme.tenant, gpus=2)
    past_runs(acme, cluster, name="train", seconds=600)
    running(acme, cluster, name="train", gpus_per_node=2, nodes=1, ran=100)  # the quota's 2
    waiting = queued(acme, cluster, name="train", gpus_per_node=2)  # 2 of 4 GPUs idle
    now = timezone.now()
    estimates_refresh(cluster_id=cluster.pk, now=now)
    p50 = at(detail(acme, waiting)["expected_start"]["p50"])
    assert p50 == pytest.approx(now.timestamp() + (0 if lends else 500), abs=1)


def test_a_job_that_cannot_start_says_why_instead_of_a_time(acme, cluster):
    Quota.objects.create(tenant=acme.tenant, gpus=2)
    over = queued(acme, cluster, state="PENDING", gpus_per_node=4)
    Node.objects.filter(cluster=cluster, name="n2").update(state="DOWN+DRAIN")
    big = queued(
        acme, cluster, state="QUEUED", role=Role.ADMIN, resources={"gpus_per_node": 4, "nodes": 2}
    )
    estimates_refresh(cluster_id=cluster.pk)
    over_start = detail(acme, over)["expected_start"]
    assert over_start["p50"] is None
    assert (
        over_start["cannot_start"] == f"tenant {acme.tenant.slug} allows 2 GPUs; this job needs 4"
    )
    assert detail(acme, big)["expected_start"]["cannot_start"] == (
        "partition gpu has 4 GPUs and 8 CPUs on healthy nodes; this job needs 8 and 2"
    )


def test_a_start_teaches_the_range_and_counts_toward_coverage(acme, cluster):
    blocker = running(acme, cluster, name="a", gpus_per_node=4, nodes=2, ran=0)
    waiting = queued(acme, cluster, state="SUBMITTED")
    now = timezone.now()
    estimates_refresh(cluster_id=cluster.pk, now=now)  # p50: the limit, 7,200 s away
    blocker.attempts.update(state=AttemptState.SUCCEEDED, ended_at=now)
    Job.objects.filter(pk=blocker.pk).update(state="SUCCEEDED")
    Job.objects.filter(pk=waiting.pk).update(state="RUNNING", started_at=now)
    waiting.attempts.create(number=1, state=AttemptState.RUNNING, started_at=now)
    before = _outcomes(cluster.name)
    counts = estimates_refresh(cluster_id=cluster.pk, now=now + timedelta(seconds=5))
    assert counts["learned"] == 1
    residuals = redis_client().lrange(_key("residuals:4", cluster.pk), 0, -1)  # waits > 1 h
    assert [float(r) for r in residuals] == [pytest.approx(math.log(S / (7200 + S)), abs=0.02)]
    assert _outcomes(cluster.name)["early"] == before.get("early", 0) + 1  # long before p10
    assert detail(acme, waiting)["expected_start"] is None


def test_the_range_is_calibrated_once_enough_starts_were_seen(acme, cluster):
    running(acme, cluster, name="a", gpus_per_node=4, nodes=2, ran=0)
    waiting = queued(acme, cluster, state="QUEUED")
    # 40 past starts: half came at a third of the predicted wait, half at the prediction
    residuals = [math.log(1 / 3)] * 20 + [0.0] * 20
    client = redis_client()
    client.rpush(_key("residuals:4", cluster.pk), *residuals)  # the bin of waits over an hour
    now = timezone.now()
    estimates_refresh(cluster_id=cluster.pk, now=now)
    expected = detail(acme, waiting)["expected_start"]
    wait = 120 * 60 + S  # the blocker's limit, smoothed
    assert "calibrated on 40 past starts" in expected["basis"]
    assert at(expected["p10"]) == pytest.approx(now.timestamp() + wait / 3 - S, abs=1)
    assert at(expected["p90"]) == pytest.approx(now.timestamp() + wait - S, abs=1)
    assert at(expected["p10"]) <= at(expected["p50"]) <= at(expected["p90"])


def test_misses_widen_the_range_and_hits_narrow_it_back(acme, cluster):
    running(acme, cluster, name="a", gpus_per_node=4, nodes=2, ran=0)
    waiting = queued(acme, cluster, state="QUEUED")
    client = redis_client()
    client.rpush(_key("residuals:4", cluster.pk), *[n / 100 for n in range(-50, 51)])
    learning._steer(client, cluster_id=cluster.pk, misses=[True] * 10)
    assert float(client.get(_key("level", cluster.pk))) == pytest.approx(0.2 - 10 * 0.008)
    estimates_refresh(cluster_id=cluster.pk, now=timezone.now())
    wide = detail(acme, waiting)["expected_start"]
    learning._steer(client, cluster_id=cluster.pk, misses=[False] * 40)  # back to 0.2
    estimates_refresh(cluster_id=cluster.pk, now=timezone.now())
    narrow = detail(acme, waiting)["expected_start"]
    assert at(wide["p10"]) < at(narrow["p10"]) < at(narrow["p90"]) < at(wide["p90"])
    # at the aim, the residuals' 10th and 90th percentiles: -0.4 and 0.4
    wait = at(narrow["p50"]) - at(narrow["computed_at"]) + S
    assert at(narrow["p90"]) - at(narrow["computed_at"]) + S == pytest.approx(
        wait * math.exp(0.4), rel=0.01
    )


def _outcomes(cluster_name: str) -> dict:
    found = {}
    for line in telemetry.render().decode().splitlines():
        if line.startswith("torus_start_estimates_total{") and f'cluster="{cluster_name}"' in line:
            outcome = line.split('outcome="')[1].split('"')[0]
            found[outcome] = float(line.rsplit(" ", 1)[1])
    return found


@pytest.mark.django_db(transaction=True)
def test_on_slurm_a_job_held_by_the_quota_is_given_the_running_ones_end(acme, slurm_cluster):
    """The real cluster: a tenant with one GPU runs a one-minute job; the second waits for
    it with an estimate before the first ends, then starts, and its start is learned."""
    Quota.objects.create(tenant=acme.tenant, gpus=1)
    client = acme.client(Role.MEMBER)
    first = submit(
        client,
        acme.project,
        command=["sleep", "8"],
        resources={"gpus_per_node": 1, "time_limit": 1},
    )
    second = submit(
        client, acme.project, command=["true"], resources={"gpus_per_node": 1, "time_limit": 1}
    )
    assert second["state"] == "PENDING"
    drive(first["id"], until={"RUNNING"})
    waiting = Job.objects.get(pk=second["id"])
    estimates_refresh(cluster_id=slurm_cluster.pk)
    expected = detail(acme, waiting)["expected_start"]
    started = Job.objects.get(pk=first["id"]).attempts.get().started_at.timestamp()
    # the first job's one-minute limit bounds its end: the second starts then, at the latest
    assert at(expected["p50"]) == pytest.approx(started + 60, abs=5)
    assert at(expected["p10"]) < at(expected["p50"]) < at(expected["p90"])
    before = sum(_outcomes(slurm_cluster.name).values())
    drive(second["id"])  # (control passes: they refresh the estimates too)
    estimates_refresh(cluster_id=slurm_cluster.pk)
    assert sum(_outcomes(slurm_cluster.name).values()) == before + 1  # its start, learned
    learned = [_key(f"residuals:{n}", slurm_cluster.pk) for n in range(5)]
    assert sum(redis_client().llen(key) for key in learned) >= 1


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_the_expected_start(live_server, acme, cluster):
    waiting = behind_a_trained_blocker(acme, cluster)
    estimates_refresh(cluster_id=cluster.pk)
    env = {"TORUS_URL": live_server.url, "TORUS_TOKEN": acme.tokens[Role.MEMBER]}
    listed = run_cli("jobs", env=env)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:6] == ["ID", "NAME", "PROJECT_SLUG", "USER", "STATE", "STARTS"]
    row = next(line for line in rows if str(waiting.pk) in line)
    # 500 s away, from 220 to 1,060 (half to twice the smoothed wait), less the seconds since
    assert re.search(r" ~[78]m \([34]m-1[78]m\) ", row), row
    shown = run_cli("show", str(waiting.pk), env=env)
    assert re.search(r"expected_start +~[78]m \([34]m-1[78]m\)", shown.stdout), shown.stdout
    assert "3 past runs of this job's name" in shown.stdout


def test_a_spec_without_a_cluster_goes_where_it_starts_soonest_and_says_why(acme, cluster):
    """Two default clusters (rows only): `cluster` is full with a job waiting, `other` idle;
    a job naming no cluster goes to `other`, and its page says why."""
    other = ClusterFactory(name=f"other-{cluster.name}")
    running(acme, cluster, name="a", gpus_per_node=4, nodes=2, ran=0)
    queued(acme, cluster, state="QUEUED")
    for each in (cluster, other):
        estimates_refresh(cluster_id=each.pk)
    body = post(acme, Role.MEMBER, acme.project, gpus=2)
    assert body["cluster"] == other.name
    assert body["placement_reason"] == (
        f"expected to start soonest here: {other.name}/gpu at once (8 GPUs free);"
        f" elsewhere: {cluster.name}/gpu in ~2 h (behind 1 waiting)"
    )
    assert (
        detail(acme, Job.objects.get(pk=body["id"]))["placement_reason"] == body["placement_reason"]
    )
    # filled in turn, `other` is behind: the next job of the same shape goes back
    running(acme, other, name="b", gpus_per_node=4, nodes=2, ran=0)
    for _ in range(3):
        queued(acme, other, state="QUEUED")
    Job.objects.filter(cluster=cluster).update(state="SUCCEEDED")
    for each in (cluster, other):
        estimates_refresh(cluster_id=each.pk)
    again = post(acme, Role.MEMBER, acme.project, gpus=2)
    assert again["cluster"] == cluster.name
    assert again["placement_reason"].startswith(
        f"expected to start soonest here: {cluster.name}/gpu"
    )


def test_a_named_or_default_cluster_says_so(acme, cluster):
    body = post(acme, Role.MEMBER, acme.project, gpus=1, cluster=cluster.name)
    assert body["placement_reason"] == f"the spec names {cluster.name}"
    acme.project.default_cluster = cluster
    acme.project.save()
    body = post(acme, Role.MEMBER, acme.project, gpus=1)
    assert body["placement_reason"] == f"{cluster.name} is the project's default cluster"
