"""Jobs through the REST API on the real Kubernetes control plane (platform/services
component `kubernetes`: etcd, kube-apiserver, controller-manager, scheduler, kwok fake GPU
nodes, Kueue): the same spec and lifecycle as on Slurm.

kwok runs no process: pods go Pending -> Running -> Succeeded after the delays the cluster's
config gives (kwok_delays), and their log is kwok's fixed file. So the checkpoint of the
self-healing test is written by the test itself into the job's TORUS_CHECKPOINT_DIR (the
project tree the pod mounts, at the same path), as the job would write it.
"""

import contextlib
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from kubernetes import client

from apps.compute.backends import for_cluster
from apps.compute.models import Cluster
from apps.compute.services import cluster_sync
from apps.jobs.models import AttemptState, Job
from apps.logs.es import client as es
from apps.logs.index import template_install
from apps.logs.shipper import ship_pass
from apps.quotas.models import Quota
from apps.tenancy.models import Role
from tests.conftest import make_world
from tests.factories import ClusterFactory
from tests.jobs.conftest import drive, submit
from tests.kubernetes.conftest import kube_admin, kube_env  # noqa: F401 (fixtures)
from tests.kubernetes.kube_helpers import (
    IMAGE,
    add_node,
    delete_tenant_objects,
    forget_pools,
    make_cluster,
    start_watch,
)
from tests.logs.conftest import delete_tenant_indices

pytestmark = pytest.mark.django_db(transaction=True)
FAST = {"pod-create": "0s", "pod-ready": "0s", "pod-complete": "2s"}
SLOW = {"pod-create": "0s", "pod-ready": "0s", "pod-complete": "600s"}


@pytest.fixture
def tenants(transactional_db):
    """A tenant of its own (its namespace is its slug's) and another."""
    suffix = uuid.uuid4().hex[:6]
    return make_world(f"k8s{suffix}"), make_world(f"oth{suffix}")


@pytest.fixture
def world(tenants, kube_admin):  # noqa: F811
    """The tenants, and what the backend made for them removed after the test."""
    yield tenants
    for tenant in tenants:
        delete_tenant_indices(tenant.tenant.slug)
        delete_tenant_objects(kube_admin, tenant.tenant.slug)


def rows_only() -> Cluster:
    """Cluster `local-k8s` as database rows (one 8-GPU node): enough for the API's checks."""
    cluster = Cluster.objects.create(
        name="local-k8s",
        backend="kubernetes",
        supports_containers=True,
        config={"api_url": "https://127.0.0.1:9", "default_image": IMAGE},
    )
    cluster.nodes.create(name="k1", cpus=8, memory_mb=16384, accelerators={"gpu": {"": 8}})
    cluster.partitions.create(name="default", is_default=True, node_names=["k1"])
    return cluster


@pytest.fixture
def pool(kube_admin):  # noqa: F811
    """Two fake 8-GPU nodes in a pool of this test's own (other tests' nodes stay as they are)."""
    name = f"cj{uuid.uuid4().hex[:6]}"
    nodes = [add_node(kube_admin, pool=name) for _ in range(2)]
    yield name, nodes
    core = client.CoreV1Api(kube_admin)
    for node in nodes:
        try:
            core.delete_node(node)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def register(kube_env, pool_name: str, *, delays: dict) -> Cluster:  # noqa: F811
    """The control plane as Cluster `local-k8s` (as cluster_register_local writes it, with
    this test's kwok delays); its pools and nodes read once."""
    cluster = make_cluster(
        kube_env,
        job_root=settings.TORUS_JOB_ROOT,
        name="local-k8s",
        default_image=IMAGE,
        kwok_delays=delays,
    )
    forget_pools(cluster)
    assert cluster_sync(cluster=cluster), Cluster.objects.get(pk=cluster.pk).last_error
    assert cluster.partitions.filter(name=pool_name).exists(), "the test's pool is a partition"
    return cluster


@contextlib.contextmanager
def watching(cluster: Cluster):
    """The cluster's watcher (what `manage.py kube_watch` runs), in a thread."""
    watch = start_watch(for_cluster(cluster))
    try:
        yield watch
    finally:
        watch.stop()
        watch.store.clear()


@pytest.fixture
def fast_cluster(world, pool, kube_env):  # noqa: F811
    cluster = register(kube_env, pool[0], delays=FAST)
    with watching(cluster):
        yield cluster


@pytest.fixture
def slow_cluster(world, pool, kube_env):  # noqa: F811
    cluster = register(kube_env, pool[0], delays=SLOW)
    with watching(cluster):
        yield cluster


def kube_jobs(api, attempt) -> list:
    """The Kubernetes Jobs of an attempt (by the label the backend puts on them)."""
    found = client.BatchV1Api(api).list_job_for_all_namespaces(
        label_selector=f"torus.io/attempt-id={attempt.pk}"
    )
    return found.items


def kube_pods(api, attempt) -> list:
    found = client.CoreV1Api(api).list_pod_for_all_namespaces(
        label_selector=f"torus.io/attempt-id={attempt.pk}"
    )
    return found.items


def timeline(job: Job) -> list[tuple[str, str]]:
    """A job's states and reasons, for assertion messages."""
    return [(e.to_state, e.reason) for e in job.events.order_by("created_at")]


def spec(pool_name: str, *, resources: dict | None = None, **extra) -> dict:
    return {
        "cluster": "local-k8s",
        "command": ["python", "train.py", "--epochs", "2"],
        "resources": {"gpus_per_node": 1, "time_limit": 30, "partition": pool_name}
        | (resources or {}),
        **extra,
    }


# -- lifecycle -------------------------------------------------------------------------------


def test_a_job_on_local_k8s_runs_to_succeeded(world, pool, fast_cluster, kube_admin):  # noqa: F811
    tenant, _ = world
    job = submit(tenant.client(Role.MEMBER), tenant.project, **spec(pool[0]))
    assert job["cluster"] == "local-k8s"
    finished = drive(job["id"], timeout=120)
    assert finished.state == "SUCCEEDED", timeline(finished)
    attempt = finished.attempts.get()
    assert attempt.state == AttemptState.SUCCEEDED and attempt.exit_code == 0
    assert attempt.backend_id and not attempt.backend_id.isdigit()  # an opaque id
    assert attempt.nodes and set(attempt.nodes) <= set(pool[1])
    (kube_job,) = kube_jobs(kube_admin, attempt)
    assert kube_job.metadata.namespace == f"torus-{tenant.tenant.slug}"
    container = kube_job.spec.template.spec.containers[0]
    assert container.image == IMAGE  # the cluster's default image: the spec names none
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    env = {e.name: e.value for e in container.env or []}
    assert env["TORUS_CHECKPOINT_DIR"] == finished.checkpoint_dir
    assert env["TORUS_ATTEMPT"] == "1" and "SLURM_CONF" not in env
    states = [e.to_state for e in finished.events.order_by("created_at")]
    assert states[:3] == ["PENDING", "QUEUED", "SUBMITTED"] and states[-1] == "SUCCEEDED"
    assert "RUNNING" in states
    submitted = finished.events.get(to_state="SUBMITTED")
    assert submitted.reason == f"submitted as Kubernetes job {attempt.backend_id}"


def test_a_two_node_job_runs_its_pods_together(world, pool, fast_cluster, kube_admin):  # noqa: F811
    tenant, _ = world
    body = spec(pool[0], resources={"nodes": 2, "gpus_per_node": 4})
    finished = drive(submit(tenant.client(Role.MEMBER), tenant.project, **body)["id"], timeout=120)
    assert finished.state == "SUCCEEDED", timeline(finished)
    assert finished.gpus == 8
    attempt = finished.attempts.get()
    (kube_job,) = kube_jobs(kube_admin, attempt)
    assert kube_job.spec.completions == 2 and kube_job.spec.parallelism == 2
    assert kube_job.spec.completion_mode == "Indexed"
    pods = kube_pods(kube_admin, attempt)
    assert len(pods) == 2 and {p.status.phase for p in pods} == {"Succeeded"}


def test_cancel_deletes_the_kubernetes_job(world, pool, slow_cluster, kube_admin):  # noqa: F811
    tenant, _ = world
    member = tenant.client(Role.MEMBER)
    job = submit(member, tenant.project, **spec(pool[0]))
    running = drive(job["id"], until={"RUNNING"}, timeout=120)
    attempt = running.attempts.get()
    assert kube_jobs(kube_admin, attempt)
    response = member.post(reverse("job-cancel", kwargs={"pk": job["id"]}))
    assert response.status_code in (200, 202), response.content
    cancelled = drive(job["id"], timeout=60)
    assert cancelled.state == "CANCELLED", cancelled.state_reason
    deadline = time.monotonic() + 60
    while kube_jobs(kube_admin, attempt) or kube_pods(kube_admin, attempt):
        assert time.monotonic() < deadline, "the Job or its pods outlived the cancel"
        time.sleep(0.5)


def test_another_tenants_job_is_not_found(world, pool, fast_cluster):
    tenant, other = world
    job = submit(tenant.client(Role.MEMBER), tenant.project, **spec(pool[0]))
    outsider = other.client(Role.OWNER)
    for name, method in (("job-detail", "get"), ("job-output-logs", "get"), ("job-cancel", "post")):
        response = getattr(outsider, method)(reverse(name, kwargs={"pk": job["id"]}))
        assert response.status_code == 404, (name, response.content)
    assert Job.objects.get(pk=job["id"]).cancel_requested is False


def test_the_tenant_gpu_quota_held_by_kueue_keeps_a_job_waiting_there(
    world,
    pool,
    slow_cluster,
    kube_admin,  # noqa: F811
):
    """With tenant_gpu_quota "cluster" admission leaves the tenant's GPU quota to the cluster:
    both jobs go to Kubernetes, Kueue runs the first and holds the second, whose reason and
    position come from the backend."""
    tenant, _ = world
    slow_cluster.config = {**slow_cluster.config, "tenant_gpu_quota": "cluster"}
    slow_cluster.save()
    Quota.objects.create(tenant=tenant.tenant, gpus=8)
    member = tenant.client(Role.MEMBER)
    body = spec(pool[0], resources={"gpus_per_node": 8})
    first = submit(member, tenant.project, **{**body, "name": "first"})
    drive(first["id"], until={"RUNNING"}, timeout=120)
    second = submit(member, tenant.project, **{**body, "name": "second"})
    waiting = drive(
        second["id"],
        timeout=120,
        condition=lambda j: j.state == "SUBMITTED" and "Kueue" in j.state_reason,
    )
    assert waiting.state_reason.startswith("waiting in Kueue"), waiting.state_reason
    assert waiting.queue_position == 1
    queue = client.CustomObjectsApi(kube_admin).get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", f"torus-{tenant.tenant.slug}"
    )
    quotas = [
        resource["nominalQuota"]
        for group in queue["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
        if resource["name"] == "nvidia.com/gpu"
    ]
    assert quotas and all(str(q) == "8" for q in quotas), quotas
    assert Job.objects.get(pk=first["id"]).state == "RUNNING"


# -- what the spec may not ask for -----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"privileged": True}, ["privileged"], "never run privileged"),
        ({"volumes": [{"hostPath": {"path": "/etc"}}]}, ["volumes"], "Host paths"),
        ({"hostPath": "/etc"}, ["hostPath"], "Host paths"),
        ({"run_as_user": 0}, ["run_as_user"], "runs as its submitter"),
        ({"securityContext": {"runAsUser": 0}}, ["securityContext"], "security context"),
        (
            {"environment": {"type": "container", "image": "evil.example.com/x:1"}},
            ["environment", "image"],
            "only the cluster's default image",
        ),
    ],
)
def test_refused_specs_are_400_naming_the_field(tenants, change, path, words):
    tenant, _ = tenants
    rows_only()
    body = {"project": str(tenant.project.id), "name": "t", **spec("any"), **change}
    del body["resources"]["partition"]
    response = tenant.client(Role.MEMBER).post(reverse("job-list"), body, format="json")
    assert response.status_code == 400, response.content
    found = response.json()["error"]["fields"]
    for key in path:
        found = found[key]
    assert words in found[0], found
    assert not Job.objects.exists()


def test_an_image_on_slurm_is_refused_at_environment_image(tenants):
    tenant, _ = tenants
    ClusterFactory(name="slurm-here")  # the platform's default, a Slurm cluster
    rows_only()
    body = {
        "project": str(tenant.project.id),
        "name": "t",
        "command": ["true"],
        "environment": {"type": "container", "image": "registry.example.com/team/x:1"},
    }
    member = tenant.client(Role.MEMBER)
    for named in ({}, {"cluster": "slurm-here"}):
        response = member.post(reverse("job-list"), {**body, **named}, format="json")
        assert response.status_code == 400, response.content
        message = response.json()["error"]["fields"]["environment"]["image"][0]
        assert "runs no containers" in message and "cluster: local-k8s" in message
    tenant.tenant.image_registries = ["registry.example.com/team"]
    tenant.tenant.save()
    accepted = member.post(reverse("job-list"), {**body, "cluster": "local-k8s"}, format="json")
    assert accepted.status_code == 201, accepted.content
    assert accepted.json()["cluster"] == "local-k8s"


# -- self-healing ----------------------------------------------------------------------------


def test_a_lost_node_restarts_the_job_from_its_checkpoint_elsewhere(
    world,
    pool,
    slow_cluster,
    kube_admin,  # noqa: F811
):
    tenant, _ = world
    body = spec(
        pool[0],
        resources={"gpus_per_node": 8},  # a whole node: the next attempt must use the other
        restart_policy={"max_restarts": 2, "backoff_seconds": 0},
    )
    job = submit(tenant.client(Role.MEMBER), tenant.project, **body)
    running = drive(job["id"], until={"RUNNING"}, timeout=120)
    first = running.attempts.get(number=1)
    assert first.nodes and first.nodes[0] in pool[1]
    lost = first.nodes[0]
    # what the job would write (kwok runs no process): a checkpoint in TORUS_CHECKPOINT_DIR,
    # on the project tree the pod mounts at the same path
    checkpoints = Path(running.checkpoint_dir)
    checkpoints.mkdir(parents=True, exist_ok=True)
    (checkpoints / "step-00000020.pt").write_bytes(b"weights")
    (checkpoints / "latest").write_text("step-00000020.pt")
    client.CoreV1Api(kube_admin).delete_node(lost)
    again = drive(
        job["id"],
        timeout=180,
        condition=lambda j: j.attempts.filter(number=2, state=AttemptState.RUNNING).exists(),
    )
    first.refresh_from_db()
    assert first.state in (AttemptState.NODE_FAIL, AttemptState.LOST), first.state
    second = again.attempts.get(number=2)
    assert second.resume_from == str(checkpoints / "step-00000020.pt")
    assert lost in second.excluded_nodes, (first.nodes, first.reason, timeline(again))
    assert second.nodes and lost not in second.nodes
    restart = again.events.get(to_state="RESTARTING")
    assert f"on {lost}" in restart.reason and "resumes from" in restart.reason
    (kube_job,) = kube_jobs(kube_admin, second)
    pod_spec = kube_job.spec.template.spec
    env = {e.name: e.value for e in pod_spec.containers[0].env}
    assert env["TORUS_RESUME_FROM"] == second.resume_from and env["TORUS_ATTEMPT"] == "2"
    terms = pod_spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    excluded = [
        value
        for term in terms.node_selector_terms
        for expression in term.match_fields or []
        if (expression.key, expression.operator) == ("metadata.name", "NotIn")
        for value in expression.values
    ]
    assert lost in excluded


# -- logs --------------------------------------------------------------------------------------


def test_pod_logs_reach_search_through_the_unchanged_shipper(world, pool, fast_cluster):
    tenant, _ = world
    template_install()
    member = tenant.client(Role.MEMBER)
    job = submit(member, tenant.project, **spec(pool[0]))
    finished = drive(job["id"], timeout=120)
    assert finished.state == "SUCCEEDED", timeline(finished)
    attempt = finished.attempts.get()
    deadline = time.monotonic() + 60
    while not attempt.logs_shipped:
        ship_pass()
        attempt.refresh_from_db()
        assert time.monotonic() < deadline, "the attempt's logs were never all shipped"
    chunk = member.get(reverse("job-output-logs", kwargs={"pk": job["id"]})).json()
    assert "epoch 2 loss=0.41" in chunk["data"] and chunk["complete"]
    es().indices.refresh(index="torus-logs-*")
    found = member.get(reverse("logs-search"), {"q": "loss", "job": job["id"]}).json()
    assert found["total"] == 2, found
    messages = sorted(hit["message"] for hit in found["hits"])
    assert messages == ["epoch 1 loss=0.93", "epoch 2 loss=0.41"]
