"""A notification end to end: a job submitted through the API runs on the real Slurm, fails,
and the person subscribed is mailed by the real Celery worker through a real SMTP server, with
its reason and last lines; the bell's inbox has it too. Control passes run as beat runs them."""

import time

import pytest
from django.urls import reverse

from apps.tenancy.models import Role
from tests.jobs.conftest import submit

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_failing_on_slurm_is_mailed_by_the_worker(
    acme, celery_worker, smtp_server, control_loop
):
    member = acme.client(Role.MEMBER)
    made = member.post(
        reverse("subscription-list"),
        {"events": ["failed"], "channel": "email", "address": "member@example.org",
         "project": str(acme.project.pk)},
        format="json",
    )  # fmt: skip
    assert made.status_code == 201, made.content
    job = submit(
        member,
        acme.project,
        name="doomed",
        command=["bash", "-c", "for i in 1 2 3; do echo step $i; done; echo boom >&2; exit 3"],
    )
    deadline = time.monotonic() + 120
    while not smtp_server.messages():
        assert time.monotonic() < deadline, "no mail came"
        time.sleep(0.5)
    [mail] = smtp_server.messages()
    body = mail.get_payload()
    assert mail["Subject"] == "Torus: job doomed failed" and mail["To"] == "member@example.org"
    assert f"Job doomed ({job['id']}) in {acme.project.slug} failed: exit code 3" in body
    assert "[stdout] step 3" in body and "[stderr] boom" in body
    assert mail["X-Torus-Notification"]
    inbox = member.get(reverse("subscription-inbox")).json()["items"]
    assert [(i["event"], i["job"]) for i in inbox] == [("failed", job["id"])]
