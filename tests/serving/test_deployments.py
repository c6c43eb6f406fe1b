"""Deployments through the API: made, READY on the real Slurm with the real engine, listed,
scaled, removed; bad input is a 400 naming the field with nothing written; another tenant's
deployment is a 404; replicas are jobs, so quotas hold them with a reason."""

import httpx
import pytest
from django.urls import reverse

from apps.jobs.models import Job
from apps.quotas.models import Quota
from apps.serving.keys import engine_key
from apps.serving.models import Deployment, DeploymentEvent, DeploymentKey, Replica
from apps.serving.reconcile import reconcile_all
from apps.tenancy.models import AuditEvent, Role
from tests.factories import ClusterFactory
from tests.jobs.conftest import drive, submit
from tests.serving.conftest import (
    deploy,
    event_kinds,
    register_gguf,
    wait_ready,
)

pytestmark = pytest.mark.django_db(transaction=True)


def url(deployment_id, *parts) -> str:
    return reverse("deployment-detail", args=[deployment_id]) + "".join(f"{p}/" for p in parts)


def test_bad_input_is_a_400_naming_the_field_and_nothing_is_written(acme, gguf_version, tmp_path):
    client = acme.client(Role.MEMBER)
    no_gguf = tmp_path / "weights.bin"
    no_gguf.write_bytes(b"not a gguf")
    register_gguf(acme, no_gguf, name="plain", alias=None)
    ClusterFactory(name="pods", backend="kubernetes", is_default=False)
    cases = [
        ({"name": "Not A Slug"}, "name"),
        ({"name": "-x"}, "name"),
        ({"model": "../etc"}, "model"),
        ({"model": "nope@production"}, "model"),
        ({"model": "tiny:9"}, "model"),
        ({"model": "plain:1"}, "model"),  # no .gguf file for the llama.cpp runtime
        ({"replicas": 100}, "replicas"),
        ({"replicas": -1}, "replicas"),
        ({"replicas": 3, "replicas_max": 2}, "replicas"),
        ({"replicas_min": 3, "replicas_max": 2}, "replicas_max"),
        ({"memory": "lots"}, "memory"),
        ({"memory": "64M"}, "memory"),  # the fit check: weights + KV cache + buffers do not fit
        ({"kv_cache_type": "q4_0"}, "kv_cache_type"),
        ({"slots": 0}, "slots"),
        ({"context": 4}, "context"),
        ({"cluster": "nowhere"}, "cluster"),
        ({"cluster": "pods"}, "cluster"),  # a Kubernetes cluster without a serving image
        ({"gpu_type": "a100;rm -rf /"}, "gpu_type"),
        ({"scale_to_zero_after_s": 1}, "scale_to_zero_after_s"),
        ({"max_request_bytes": 10}, "max_request_bytes"),
        ({"privileged": True}, "privileged"),
    ]
    for body, field in cases:
        response = client.post(
            reverse("deployment-list"),
            {"project": str(acme.project.pk), "name": "tiny", "model": "tiny:1", **body},
            format="json",
        )
        assert response.status_code == 400, (body, response.content)
        error = response.json()["error"]
        assert field in error["fields"], (body, error)
        assert error["fields"][field][0], (body, error)
    response = client.post(reverse("deployment-list"), "{not json", content_type="application/json")
    assert response.status_code == 400
    assert not Deployment.objects.exists() and not Job.objects.exists()
    assert not Replica.objects.exists() and not DeploymentEvent.objects.exists()

    # a good one, then a second of the same name: 400 at name, the first unchanged
    first = deploy(client, acme.project)
    response = client.post(
        reverse("deployment-list"),
        {"project": str(acme.project.pk), "name": "tiny", "model": "tiny:1"},
        format="json",
    )
    assert response.status_code == 400 and "name" in response.json()["error"]["fields"]
    for body, field in [
        ({"replicas": 5}, "replicas"),  # beyond replicas_max (1)
        ({"replicas_min": 2, "replicas_max": 1}, "replicas_max"),
        ({"model": "plain:1"}, "model"),  # another model
        ({"model": "tiny:7"}, "model"),
        ({"cpus": 4}, "cpus"),  # not changeable: unknown to a PATCH
        ({}, "non_field_errors"),
    ]:
        response = client.patch(url(first["id"]), body, format="json")
        assert response.status_code == 400, (body, response.content)
        error = response.json()["error"]
        assert field in error["fields"] or (field == "non_field_errors" and error["message"])
    shown = client.get(url(first["id"])).json()
    assert shown["replicas"]["desired"] == 1 and shown["ref"] == "tiny@production"
    assert event_kinds(first["id"]) == ["created"]


def test_a_dry_run_checks_as_a_create_and_writes_nothing(acme, gguf_version):
    client = acme.client(Role.MEMBER)
    body = {"project": str(acme.project.pk), "name": "tiny", "model": "tiny@production"}
    response = client.post(reverse("deployment-list"), {**body, "dry_run": True}, format="json")
    assert response.status_code == 200, response.content
    shown = response.json()
    assert shown["version"] == 1 and shown["follow_alias"] == "production"
    fit = shown["fit"]
    assert fit["fits"] is True and fit["breakdown"]["kv_cache"] > 0, fit
    # 4 slots x 2048 tokens x 4 layers x 2 (K, V) x 2 KV heads x 64 x 2 bytes (f16)
    assert fit["breakdown"]["kv_cache"] == 4 * 2048 * 4 * 2 * 2 * 64 * 2
    refused = client.post(
        reverse("deployment-list"), {**body, "dry_run": True, "memory": "64M"}, format="json"
    )
    assert refused.status_code == 400 and "memory" in refused.json()["error"]["fields"]
    assert not Deployment.objects.exists() and not DeploymentEvent.objects.exists()
    # the list per tenant
    deploy(client, acme.project)
    listed = client.get(reverse("deployment-list"), {"tenant": str(acme.tenant.pk)}).json()
    assert [d["name"] for d in listed["results"]] == ["tiny"]


def test_another_tenants_deployment_is_not_found(acme, globex, gguf_version):
    mine = deploy(acme.client(Role.MEMBER), acme.project)
    key = acme.client(Role.MEMBER).post(url(mine["id"], "keys"), {"name": "ci"}, format="json")
    assert key.status_code == 201
    other = globex.client(Role.OWNER)
    assert other.get(url(mine["id"])).status_code == 404
    assert other.patch(url(mine["id"]), {"replicas": 0}, format="json").status_code == 404
    assert other.delete(url(mine["id"])).status_code == 404
    for part in ("events", "replicas", "keys", "usage"):
        assert other.get(url(mine["id"], part)).status_code == 404, part
    assert other.post(url(mine["id"], "keys"), {"name": "x"}, format="json").status_code == 404
    revoke = url(mine["id"], "keys", key.json()["id"])
    assert other.delete(revoke).status_code == 404
    assert other.get(reverse("deployment-list")).json()["results"] == []
    # deploying into another tenant's project: not found either
    response = other.post(
        reverse("deployment-list"),
        {"project": str(acme.project.pk), "name": "steal", "model": "tiny:1"},
        format="json",
    )
    assert response.status_code == 404
    assert Deployment.objects.count() == 1
    assert DeploymentKey.objects.get().revoked_at is None


def test_roles_viewers_read_members_of_the_project_deploy(acme, gguf_version):
    viewer = acme.client(Role.VIEWER)
    body = {"project": str(acme.project.pk), "name": "tiny", "model": "tiny:1"}
    response = viewer.post(reverse("deployment-list"), body, format="json")
    assert response.status_code == 403
    made = deploy(acme.client(Role.MEMBER), acme.project)
    assert viewer.get(url(made["id"])).status_code == 200
    assert viewer.post(url(made["id"], "keys"), {"name": "x"}, format="json").status_code == 403
    assert viewer.delete(url(made["id"])).status_code == 403
    created = AuditEvent.objects.filter(action="deployment.create").get()
    assert created.actor == acme.users[Role.MEMBER]


def test_keys_are_shown_once_and_kept_as_hashes(acme, gguf_version):
    client = acme.client(Role.MEMBER)
    made = deploy(client, acme.project)
    response = client.post(url(made["id"], "keys"), {"name": "ci"}, format="json")
    assert response.status_code == 201
    token = response.json()["token"]
    assert token.startswith("tsk_") and response.json()["prefix"] == token[:12]
    row = DeploymentKey.objects.get()
    assert token not in row.token_hash and len(row.token_hash) == 64
    listed = client.get(url(made["id"], "keys")).json()["results"]
    assert [k["name"] for k in listed] == ["ci"] and "token" not in listed[0]
    assert client.delete(url(made["id"], "keys", row.pk)).status_code == 204
    row.refresh_from_db()
    assert row.revoked_at is not None
    bad = client.post(url(made["id"], "keys"), {"name": "a b"}, format="json")
    assert bad.status_code == 400 and "name" in bad.json()["error"]["fields"]


def test_a_replica_beyond_the_quota_waits_with_the_reason(acme, gguf_version, slurm_cluster):
    """Replicas are jobs: a project quota of one GPU admits the first replica's job and holds
    the second's, and the deployment says why."""
    Quota.objects.create(tenant=acme.tenant, project=acme.project, gpus=1)
    made = deploy(acme.client(Role.MEMBER), acme.project, replicas=2, gpus=1)
    reconcile_all()
    jobs = Job.objects.filter(kind="serve").order_by("created_at")
    assert jobs.count() == 2
    states = sorted(job.state for job in jobs)
    assert states == ["PENDING", "QUEUED"], states
    waiting = jobs.get(state="PENDING")
    assert "GPU" in waiting.state_reason, waiting.state_reason
    deployment = Deployment.objects.get(pk=made["id"])
    assert deployment.state == "STARTING"
    assert deployment.state_reason.startswith("waiting: ") or "starting" in deployment.state_reason
    replicas = acme.client(Role.MEMBER).get(url(made["id"], "replicas")).json()["results"]
    assert sorted(r["job_state"] for r in replicas) == ["PENDING", "QUEUED"]
    assert all(r["state"] == "STARTING" for r in replicas)


def test_deploy_through_the_api_reaches_ready_and_serves(acme, gguf_version, serving_loop):
    client = acme.client(Role.MEMBER)
    made = deploy(client, acme.project, replicas=1, slots=2, context=512)
    assert made["state"] == "PENDING" and made["version"]["number"] == 1
    assert made["follow_alias"] == "production" and made["gateway"] == f"/serve/{made['id']}/v1"
    deployment = wait_ready(made["id"], replicas=1)

    replica = deployment.replicas.get(state="READY")
    job = replica.job
    assert job.kind == "serve" and job.user == acme.users[Role.MEMBER]
    assert job.project == acme.project and job.state == "RUNNING"
    attempt = job.attempts.get()
    assert attempt.model_version == gguf_version  # lineage: the version the replica serves
    # the engine answers with the deployment's key only; the key is in no argv and no row
    base = f"http://{replica.host}:{replica.port}"
    key = engine_key(deployment_id=deployment.pk)
    assert httpx.post(f"{base}/v1/completions", json={"prompt": "hi"}).status_code == 401
    answer = httpx.post(
        f"{base}/v1/completions",
        json={"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] >= 1
    assert key not in str(job.spec)
    models = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()
    assert "tiny:1" in str(models)

    shown = client.get(url(made["id"])).json()
    assert shown["state"] == "READY" and shown["replicas"]["ready"] == 1
    replicas = client.get(url(made["id"], "replicas")).json()["results"]
    assert [(r["state"], r["version"], r["job"]) for r in replicas] == [("READY", 1, str(job.pk))]
    kinds = event_kinds(made["id"])
    assert kinds[:3] == ["created", "replica_started", "replica_ready"], kinds
    ready = DeploymentEvent.objects.get(deployment_id=made["id"], kind="replica_ready")
    print(f"\nserving: replica submitted to READY {ready.data['seconds']:.2f} s")  # for the docs
    listed = client.get(reverse("deployment-list")).json()["results"]
    assert [d["name"] for d in listed] == ["tiny"]

    # scale to two through the API, then archive it (it ran replicas: never deleted): the
    # replicas' jobs end
    response = client.patch(url(made["id"]), {"replicas": 2, "replicas_max": 2}, format="json")
    assert response.status_code == 200, response.content
    wait_ready(made["id"], replicas=2)
    jobs = list(Replica.objects.filter(deployment_id=made["id"]).values_list("job_id", flat=True))
    assert client.delete(url(made["id"])).status_code == 409  # history: archived instead
    response = client.post(url(made["id"], "archive"), {"confirm": "tiny"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "STOPPED" and response.json()["archived_at"]
    assert [d["name"] for d in client.get(reverse("deployment-list")).json()["results"]] == []

    def ended() -> bool:
        return all(Job.objects.get(pk=j).state == "CANCELLED" for j in jobs)

    wait_for_jobs(ended)


def wait_for_jobs(condition, timeout: float = 60) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the replicas' jobs did not end"
        time.sleep(0.25)


def test_a_serve_job_made_through_the_jobs_api_is_refused(acme, slurm_cluster):
    """Only a deployment's replica runs as kind serve (it gets the engine key)."""
    body = submit(acme.client(Role.MEMBER), acme.project, kind="serve", command=["true"])
    job = drive(body["id"])
    assert job.state == "FAILED"
    assert "only as a deployment's replica" in job.state_reason, job.state_reason


def test_a_deployed_model_is_archived_with_its_deployment(acme, gguf_version):
    made = deploy(acme.client(Role.MEMBER), acme.project)
    admin = acme.client(Role.ADMIN)
    model_url = reverse("model-detail", args=[gguf_version.model_id])
    response = admin.delete(model_url)
    assert response.status_code == 409, response.content
    assert "has history (1 versions)" in response.json()["error"]["message"]
    name = gguf_version.model.name
    response = admin.post(f"{model_url}archive/", {"confirm": name}, format="json")
    assert response.status_code == 200, response.content
    shown = admin.get(url(made["id"])).json()
    assert shown["archived_at"] and shown["state"] == "STOPPED"


def test_a_replicas_serve_json_is_taken_only_at_the_host_its_cluster_reports(acme):
    """The job's user writes serve.json: the platform takes its port only with the host the
    cluster reports for the replica (Slurm: the node's loopback; a Kubernetes cluster: the
    pod's IP, tests/serving/test_kubernetes_replicas.py), never a link or a large file."""
    from apps.jobs import paths
    from apps.jobs.models import JobAttempt
    from apps.serving.replicas import read_endpoint
    from tests.factories import make_job

    job = make_job(
        project=acme.project,
        user=acme.users[Role.MEMBER],
        state="RUNNING",
        cluster=ClusterFactory(backend="slurm"),
    )
    JobAttempt.objects.create(job=job, number=1, state="RUNNING", nodes=["n1"])
    info = paths.job_dir(job) / "serve.json"
    info.parent.mkdir(parents=True)
    for written, taken in [
        ('{"host": "127.0.0.1", "port": 41000}', ("127.0.0.1", 41000)),
        ('{"host": "10.9.8.7", "port": 41000}', None),  # not where the cluster runs it
        ('{"host": "169.254.169.254", "port": 8080}', None),
        ('{"port": 41000}', None),
        ('{"host": "127.0.0.1", "port": 80}', None),
        ('{"host": "127.0.0.1", "port": "41000"}', None),
        ("[1, 2]", None),
        ('{"host": "127.0.0.1", "port": 41000, "pad": "' + "x" * 5000 + '"}', None),
    ]:
        info.write_text(written)
        assert read_endpoint(job=job) == taken, written
    info.unlink()
    target = info.parent / "elsewhere.json"
    target.write_text('{"host": "127.0.0.1", "port": 41000}')
    info.symlink_to(target)
    assert read_endpoint(job=job) is None
