"""Usage samples on the real Slurm (sstat, run as each job's owner by the privileged helper):
a job's CPU and memory in its metrics; a job with no output and no CPU use told `stalled`; a
project's idle policy telling, then cancelling, a job that does nothing, while a job that
beats its heart (`torus-heartbeat`) runs on."""

import time

import pytest
from django.urls import reverse

from apps.identity import privileged
from apps.jobs.models import Job
from apps.logs.models import JobMetric
from apps.logs.shipper import ship_pass
from apps.logs.usage import usage_pass
from apps.notifications.messages import text
from apps.notifications.models import Notification
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, submit

pytestmark = pytest.mark.django_db(transaction=True)

BURN = ["python3", "-c", "import time\nt = time.time()\nwhile time.time() - t < 300: pass"]
HEARTBEAT = ["bash", "-c", "while true; do echo torus-heartbeat; sleep 3; done"]


def _running(client, project, name: str, command: list[str]) -> Job:
    job = submit(client, project, name=name, command=command)
    return drive(job["id"], until={"RUNNING"}, timeout=120)


def _cpu(job: Job) -> list[float]:
    rows = JobMetric.objects.filter(job=job, name="system/cpu_cores").order_by("step")
    return [row.value for row in rows]


def test_cpu_and_memory_are_sampled_into_the_jobs_metrics(acme, slurm_cluster):
    client = acme.client(Role.MEMBER)
    burner = _running(client, acme.project, "burner", BURN)
    # another person's job: the admin's account, made by its first job
    sleeper = _running(acme.client(Role.ADMIN), acme.project, "sleeper", ["sleep", "300"])
    usage_pass()
    time.sleep(4)
    assert usage_pass()["sampled"] == 2
    # a busy core, shared with the rest of a loaded machine, against one that sleeps
    assert _cpu(burner)[-1] > 0.1 and _cpu(sleeper)[-1] < 0.05
    memory = JobMetric.objects.filter(job=burner, name="system/memory_gib").last()
    assert 0 < memory.value < 1
    url = reverse("job-output-metrics", kwargs={"pk": burner.pk})
    series = acme.client(Role.VIEWER).get(url).json()["series"]
    assert {"system/cpu_cores", "system/memory_gib"} <= set(series)
    assert series["system/cpu_cores"][-1]["step"] >= series["system/cpu_cores"][0]["step"]
    # the helper reads as the owner, and takes only numbers: another's job tells nothing
    other = acme.users[Role.ADMIN].posix_account
    assert (
        privileged.sstat(
            user=other.name, uid=other.uid, jobs=[int(burner.attempts.get().backend_id)]
        )
        == ""
    )
    with pytest.raises(privileged.HelperRefused):
        privileged.sstat(user=other.name, uid=other.uid, jobs=["1;id"])


def test_a_job_doing_nothing_is_told_stalled_and_idle_then_cancelled(
    acme, slurm_cluster, es, settings
):
    settings.TORUS_STALLED_MINUTES = 1
    project_url = reverse("project-detail", kwargs={"pk": acme.project.pk})
    admin = acme.client(Role.ADMIN)
    bad = admin.patch(project_url, {"idle_minutes": 0}, format="json")
    assert bad.status_code == 400 and "idle_minutes" in bad.json()["error"]["fields"], bad.content
    member = acme.client(Role.MEMBER)
    assert member.patch(project_url, {"idle_minutes": 1}, format="json").status_code == 403
    policy = {"idle_minutes": 1, "idle_grace_minutes": 0}
    assert admin.patch(project_url, policy, format="json").json()["idle_minutes"] == 1
    response = member.post(
        reverse("subscription-list"),
        {"events": ["stalled", "idle", "cancelled"], "channel": "email",
         "address": "member@example.org", "project": str(acme.project.pk)},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.content

    sleeper = _running(member, acme.project, "sleeper", ["sleep", "600"])
    beating = _running(member, acme.project, "beating", HEARTBEAT)
    deadline = time.monotonic() + 180
    told = set()
    while Job.objects.get(pk=sleeper.pk).state != "CANCELLED":
        assert time.monotonic() < deadline, told
        ship_pass()
        stats = usage_pass()
        told |= {name for name in ("stalled", "idle", "cancelled") if stats[name]}
        drive(sleeper.pk, condition=lambda job: True)  # a control pass: the cancel reaches Slurm
        time.sleep(5)
    assert told == {"stalled", "idle", "cancelled"}
    assert Job.objects.get(pk=beating.pk).state == "RUNNING"

    items = [item for n in Notification.objects.all() for item in n.items]
    assert {(item["name"], item["event"]) for item in items} == {
        ("sleeper", "stalled"), ("sleeper", "idle"), ("sleeper", "cancelled"),
    }  # fmt: skip
    said = text(items)
    assert "sleeper" in said and "has stalled: no output line and no CPU use for 1 minutes" in said
    assert "is idle: its CPUs idle for 1 minutes: cancelled in 0 minutes" in said
    assert (
        Job.objects.get(pk=sleeper.pk).state_reason == "cancelled: idle for 1 minutes (idle policy)"
    )
