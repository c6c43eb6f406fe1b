"""Project secrets end to end on the real Slurm cluster, Elasticsearch and the API: present in
the job (it writes a digest of each), absent from `ps`, from Elasticsearch (the job echoes
them: the indexed line shows ***), from the audit log and from every API answer as every
role; a secret deleted before dispatch fails the attempt with the reason."""

import hashlib
import json
import subprocess
import time

from django.urls import reverse

from apps.jobs import paths
from apps.jobs.models import Job
from apps.logs.es import client
from apps.logs.shipper import ship_pass
from apps.secrets.models import ProjectSecret
from apps.tenancy.models import AuditEvent, Role
from tests.conftest import ROLES
from tests.jobs.conftest import drive, submit
from tests.logs.conftest import count, delete_tenant_indices
from tests.secrets.test_secrets import VALUE, WANDB, put
from tests.tenancy.test_route_walk import acme_objects, api_route_names, route_kwargs

SCRIPT = """set -e
printf %s "$HF_TOKEN" | sha256sum | cut -d' ' -f1 > "$HOME/hf.sha256"
printf %s "$WANDB_API_KEY" | sha256sum | cut -d' ' -f1 > "$HOME/wb.sha256"
echo "hf=$HF_TOKEN wandb=$WANDB_API_KEY plain=$PLAIN"
echo "split $HF_TOKEN" >&2
sleep 4
"""


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def process_args() -> str:
    return subprocess.run(
        ["ps", "-eo", "args"], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def ship_all(job: Job) -> None:
    attempt = job.attempts.get()
    deadline = time.monotonic() + 60
    while True:
        ship_pass()
        attempt.refresh_from_db()
        if attempt.logs_shipped:
            return
        assert time.monotonic() < deadline, "the shipper never finished the attempt's logs"
        time.sleep(0.2)


def test_a_job_gets_its_secrets_and_nobody_reads_them_back(acme, slurm_cluster):
    assert put(acme, Role.MEMBER, "HF_TOKEN", VALUE).status_code == 201
    assert put(acme, Role.MEMBER, "WB", WANDB).status_code == 201
    for slug in (acme.tenant.slug,):
        delete_tenant_indices(slug)
    made = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=SCRIPT,
        secrets=["HF_TOKEN"],
        env={"WANDB_API_KEY": {"secret": "WB"}, "PLAIN": "visible"},
    )
    running = drive(made["id"], until={"RUNNING", "SUCCEEDED", "FAILED"})
    assert running.state == "RUNNING", running.state_reason
    for _ in range(3):  # while it runs: no process's command line holds a value
        listing = process_args()
        assert VALUE not in listing and WANDB not in listing
        time.sleep(0.5)
    job = drive(made["id"])
    assert job.state == "SUCCEEDED", job.state_reason
    # present in the job
    assert (paths.job_dir(job) / "hf.sha256").read_text().strip() == sha(VALUE)
    assert (paths.job_dir(job) / "wb.sha256").read_text().strip() == sha(WANDB)
    # masked before Elasticsearch: the line is there, the values are not
    ship_all(job)
    attempt = job.attempts.get()
    assert count(attempt=attempt, query="plain=visible") == 1
    hits = client().search(
        index=f"torus-logs-{acme.tenant.slug}-*",
        query={"term": {"attempt": str(attempt.pk)}},
        size=50,
    )["hits"]["hits"]
    messages = [hit["_source"]["message"] for hit in hits]
    assert "hf=*** wandb=*** plain=visible" in messages, messages
    assert "split ***" in messages, messages
    assert not any(VALUE in m or WANDB in m or VALUE[:8] in m for m in messages)
    # audited by name, never by value
    events = AuditEvent.objects.filter(tenant=acme.tenant, action__startswith="secret.")
    assert {e.action for e in events} == {"secret.set", "secret.read"}
    assert {e.changes["name"][1] for e in events if e.action == "secret.read"} == {
        "HF_TOKEN",
        "WB",
    }
    dumped = json.dumps([e.changes for e in AuditEvent.objects.filter(tenant=acme.tenant)])
    assert VALUE not in dumped and WANDB not in dumped
    # every API answer, every role: the route walk's GET of every route, plus searches
    objects = acme_objects(acme, slurm_cluster)
    objects["job"] = job
    urls = [
        reverse(name, kwargs=route_kwargs(name, objects) if takes_pk else {})
        for name, takes_pk in api_route_names()
        if not name.startswith("auth-login")
    ]
    urls += [
        reverse("logs-search") + "?q=hf",
        reverse("logs-search") + f"?q={VALUE}",
        reverse("job-output-logs", kwargs={"pk": job.pk}) + "?stream=stderr",
    ]
    seen = 0
    for role in ROLES:
        api = acme.client(role)
        for url in urls:
            response = api.get(url)
            raw = b"".join(response.streaming_content) if response.streaming else response.content
            body = raw.decode(errors="replace")
            assert VALUE not in body and WANDB not in body, (role, url)
            seen += response.status_code == 200
    assert seen > 100
    masked = acme.client(Role.VIEWER).get(reverse("job-output-logs", kwargs={"pk": job.pk})).json()
    assert "plain=visible" in masked["data"] and "hf=" + "*" * len(VALUE) in masked["data"]


def test_a_secret_deleted_before_dispatch_fails_the_attempt_with_the_reason(acme, slurm_cluster):
    assert put(acme, Role.MEMBER, "HF_TOKEN", VALUE).status_code == 201
    made = submit(acme.client(Role.MEMBER), acme.project, command=["true"], secrets=["HF_TOKEN"])
    ProjectSecret.objects.filter(project=acme.project).delete()  # before the dispatcher's pass
    job = drive(made["id"])
    assert job.state == "FAILED"
    assert "secret HF_TOKEN" in job.state_reason and "no longer exists" in job.state_reason
    assert not job.attempts.exclude(backend_id="").exists()  # never reached Slurm
    # the allowed control: the same spec with the secret in place runs
    assert put(acme, Role.MEMBER, "HF_TOKEN", VALUE).status_code == 201
    made = submit(acme.client(Role.MEMBER), acme.project, command=["true"], secrets=["HF_TOKEN"])
    assert drive(made["id"]).state == "SUCCEEDED"
