"""The job spec's cluster, container images and closed schema, and the backend contract the
jobs code relies on (translated node health, waiting messages, opaque ids, log sources)."""

import pytest
from django.urls import reverse

from apps.compute.backends.base import BackendJob, FileLogSource, LogRef
from apps.compute.backends.slurm import SlurmBackend
from apps.compute.backends.slurm_words import job_order, node_healthy
from apps.compute.models import AcceleratorType, Cluster
from apps.identity.services import JobIdentity
from apps.jobs.dispatch import accelerator_resources, build_submission
from apps.jobs.models import Job
from apps.tenancy.images import image_problem, image_repository, registry_entry_problem
from apps.tenancy.models import Role
from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db
IDENTITY = JobIdentity(user="alice", uid=200001, gid=300002, tenant_gid=300001, account="p-t_p")


def minimal(project, **extra) -> dict:
    return {
        "project": str(project.id),
        "name": "hello",
        "command": ["bash", "-c", "echo hello"],
        "resources": {"gpus_per_node": 1},
        **extra,
    }


@pytest.fixture
def k8s(db):
    """A Kubernetes cluster as rows only (not the default): runs containers."""
    return ClusterFactory(
        name="kube",
        backend="kubernetes",
        is_default=False,
        supports_containers=True,
        config={"api_url": "https://127.0.0.1:9", "default_image": "registry.local/torus/run:1"},
    )


def post(world, body, role=Role.MEMBER):
    return world.client(role).post(reverse("job-list"), body, format="json")


def fields(response) -> dict:
    return response.json()["error"]["fields"]


# -- cluster: named, defaults, unknown ----------------------------------------------------


def test_a_job_runs_on_the_cluster_its_spec_names(acme, cluster, k8s):
    response = post(acme, minimal(acme.project, cluster="kube"))
    assert response.status_code == 201, response.content
    assert response.json()["cluster"] == "kube"
    assert response.json()["spec"]["cluster"] == "kube"
    unnamed = post(acme, minimal(acme.project))
    assert unnamed.json()["cluster"] == cluster.name  # the platform's default


def test_an_unknown_cluster_is_a_400_at_cluster(acme, cluster):
    response = post(acme, minimal(acme.project, cluster="nowhere"))
    assert response.status_code == 400
    assert "No cluster named 'nowhere'" in fields(response)["cluster"][0]
    assert Job.objects.count() == 0


def test_the_projects_then_the_tenants_default_cluster(acme, cluster, k8s):
    acme.tenant.default_cluster = k8s
    acme.tenant.save()
    assert post(acme, minimal(acme.project)).json()["cluster"] == "kube"
    acme.project.default_cluster = cluster
    acme.project.save()
    assert post(acme, minimal(acme.project)).json()["cluster"] == cluster.name
    assert post(acme, minimal(acme.project, cluster="kube")).json()["cluster"] == "kube"


def test_placement_looks_only_on_the_named_cluster(acme, cluster, k8s):
    # the default cluster has 4-GPU nodes; a cluster of 8-GPU nodes is not used unless named
    big = ClusterFactory(name="big", is_default=False, with_nodes=False)
    from apps.compute.models import Node, Partition

    Partition.objects.create(cluster=big, name="p", is_default=True, node_names=["b1"])
    Node.objects.create(
        cluster=big, name="b1", cpus=64, memory_mb=65536, accelerators={"gpu": {"": 8}}
    )
    body = minimal(acme.project, resources={"gpus_per_node": 8})
    refused = post(acme, body)
    assert (
        refused.status_code == 400
        and "No partition has 1 node(s)" in fields(refused)["resources"][0]
    )
    assert post(acme, {**body, "cluster": "big"}).json()["cluster"] == "big"
    assert post(acme, {**body, "cluster": "kube"}).status_code == 400  # kube: 4-GPU nodes


# -- containers and registries ------------------------------------------------------------


def test_an_image_on_a_cluster_without_containers_is_a_400_at_environment_image(acme, cluster, k8s):
    body = minimal(acme.project, environment={"type": "container", "image": "pytorch:2"})
    response = post(acme, {**body, "cluster": cluster.name})
    assert response.status_code == 400
    message = fields(response)["environment"]["image"][0]
    assert "runs no containers" in message and "cluster: kube" in message
    assert Job.objects.count() == 0


def test_images_come_from_the_tenants_registries_or_the_clusters_default(acme, cluster, k8s):
    image = {"type": "container", "image": "registry.example.com/team/train:2"}
    body = minimal(acme.project, cluster="kube", environment=image)
    refused = post(acme, body)
    assert refused.status_code == 400
    assert "only the cluster's default image" in fields(refused)["environment"]["image"][0]
    default = {"type": "container", "image": "registry.local/torus/run:1"}
    assert post(acme, {**body, "environment": default}).status_code == 201
    acme.tenant.image_registries = ["registry.example.com/team"]
    acme.tenant.save()
    assert post(acme, body).status_code == 201
    other = {"type": "container", "image": "registry.example.com/other/train:2"}
    refused = post(acme, {**body, "environment": other})
    assert refused.status_code == 400
    assert (
        "not among this tenant's allowed registries" in (fields(refused)["environment"]["image"][0])
    )


@pytest.mark.parametrize(
    ("image", "registries", "allowed"),
    [
        ("registry.example.com/x:1", ["registry.example.com"], True),
        ("registry.example.com.evil.net/x:1", ["registry.example.com"], False),
        ("registry.example.com/teamx/y", ["registry.example.com/team"], False),
        ("registry.example.com/team/y@sha256:" + "a" * 64, ["registry.example.com/team"], True),
        ("pytorch", ["docker.io/library"], True),
        ("pytorch/pytorch:2.4", ["docker.io/library"], False),
        ("docker.io/ubuntu", ["docker.io/library"], True),
        ("localhost:5000/x", ["localhost:5000"], True),
        ("REGISTRY.example.com/x", ["registry.example.com"], True),
        ("registry.example.com/../x", ["registry.example.com"], False),
        ("registry.example.com/X", ["registry.example.com"], False),  # paths are lowercase
        ("x\n---\nkind: Pod", ["docker.io"], False),
    ],
)
def test_image_registry_rules(image, registries, allowed):
    assert (image_problem(image=image, registries=registries) == "") is allowed


def test_image_references_are_parsed_as_docker_reads_them():
    assert image_repository("pytorch:2") == "docker.io/library/pytorch"
    assert image_repository("org/img") == "docker.io/org/img"
    assert image_repository("reg.io:5000/a/b:t") == "reg.io:5000/a/b"
    assert image_repository("a b") is None
    assert registry_entry_problem("registry.example.com/team") == ""
    assert registry_entry_problem("https://registry.example.com") != ""


# -- the closed schema: privileges and host resources --------------------------------------


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"privileged": True}, ["privileged"], "never run privileged"),
        ({"securityContext": {"runAsUser": 0}}, ["securityContext"], "security context"),
        ({"run_as_user": 0}, ["run_as_user"], "runs as its submitter"),
        ({"uid": 0}, ["uid"], "runs as its submitter"),
        ({"gid": 0}, ["gid"], "project's group"),
        ({"hostNetwork": True}, ["hostNetwork"], "host's network"),
        ({"capabilities": ["SYS_ADMIN"]}, ["capabilities"], "no added capabilities"),
        ({"volumes": [{"hostPath": {"path": "/"}}]}, ["volumes"], "Host paths"),
        (
            {"environment": {"type": "container", "image": "x", "host_path": "/etc"}},
            ["environment", "host_path"],
            "Host paths",
        ),
        ({"resources": {"Privileged": True}}, ["resources", "Privileged"], "privileged"),
        ({"resources": {"run-as-group": 0}}, ["resources", "run-as-group"], "project's group"),
        ({"hostPID": True}, ["hostPID"], "host's processes"),
    ],
)
def test_asking_for_privileges_is_a_400_naming_the_field(acme, cluster, k8s, change, path, words):
    body = {**minimal(acme.project, cluster="kube"), **change}
    response = post(acme, body)
    assert response.status_code == 400, response.content
    found = fields(response)
    for key in path:
        found = found[key]
    assert words in found[0], found
    assert Job.objects.count() == 0


def test_unknown_keys_are_refused_already(acme, cluster):
    response = post(acme, {**minimal(acme.project), "node_selector": {"a": "b"}})
    assert response.status_code == 400
    assert fields(response)["node_selector"] == ["Unknown field."]


@pytest.mark.parametrize(
    ("labels", "ok"),
    [
        ({"team": "vision"}, True),
        ({"example.com/team": "vision"}, True),
        ({"torus.io/tenant": "other"}, False),
        ({"kueue.x-k8s.io/queue-name": "other"}, False),
        ({"node.kubernetes.io/x": "y"}, False),
        ({"a/b/c": "x"}, False),
        ({"team": "-x"}, False),
        ({"team": "x\n---\nkind: ClusterRoleBinding"}, False),
    ],
)
def test_labels_follow_kubernetes_syntax_and_keep_off_reserved_prefixes(acme, cluster, labels, ok):
    response = post(acme, minimal(acme.project, labels=labels))
    assert (response.status_code == 201) is ok, response.content
    if not ok:
        assert list(fields(response)["labels"]) == list(labels)


# -- the Submission a backend gets ---------------------------------------------------------


def test_the_submission_names_owner_image_resource_and_labels(acme, k8s):
    AcceleratorType.objects.get_or_create(
        gres_name="gpu", defaults={"name": "NVIDIA GPU", "resource_name": "nvidia.com/gpu"}
    )
    response = post(acme, minimal(acme.project, cluster="kube", labels={"team": "vision"}))
    job = Job.objects.get(pk=response.json()["id"])
    attempt = job.attempts.get()
    submission = build_submission(attempt, k8s, IDENTITY, resources=accelerator_resources())
    assert (submission.tenant, submission.project) == (acme.tenant.slug, acme.project.slug)
    assert submission.image == "registry.local/torus/run:1"  # the cluster's default
    assert submission.accelerator_resource == "nvidia.com/gpu"
    assert submission.labels == {
        "team": "vision",
        "torus.io/tenant": acme.tenant.slug,
        "torus.io/project": acme.project.slug,
        "torus.io/job": str(job.id),
        "torus.io/attempt": "1",
    }
    assert "SLURM_CONF" not in submission.environment
    assert submission.environment["TORUS_CHECKPOINT_DIR"] == job.checkpoint_dir


def test_a_slurm_submission_has_no_image_and_keeps_slurm_conf(acme, cluster):
    cluster.config = {**cluster.config, "slurm_conf": "/etc/slurm/slurm.conf"}
    response = post(acme, minimal(acme.project))
    attempt = Job.objects.get(pk=response.json()["id"]).attempts.get()
    submission = build_submission(attempt, cluster, IDENTITY)
    assert submission.image == "" and submission.accelerator_resource == ""
    assert submission.environment["SLURM_CONF"] == "/etc/slurm/slurm.conf"


# -- what the Slurm backend translates ----------------------------------------------------


def test_slurm_translates_node_health_ids_and_waiting_words():
    assert node_healthy("IDLE") and node_healthy("MIXED")
    for state in ("DOWN", "IDLE+DRAIN", "DOWN*+NOT_RESPONDING", "UNKNOWN", "FAIL"):
        assert not node_healthy(state)
    assert job_order("812") == 812 and job_order("12_3") == 12 and job_order("x") == 0
    backend = SlurmBackend(Cluster(name="s", config={}))
    assert backend.display_name == "Slurm"
    waiting = BackendJob(backend_id="9", tag="torus:x", state="PENDING", reason="Resources")
    assert backend.waiting_message(waiting) == "waiting in Slurm: Resources"
    waiting.reason = "None"
    assert backend.waiting_message(waiting) == "waiting in Slurm"
    assert isinstance(backend.log_source(), FileLogSource)


def test_the_file_log_source_reads_by_offsets(logs_dir):
    path = logs_dir / "stdout.log"
    ref = LogRef(tag="torus:x", backend_id="1", stream="stdout", path=str(path))
    source = FileLogSource()
    assert source.read(ref=ref, offset=0, limit=10) is None and source.size(ref=ref) is None
    path.write_bytes(b"hello\nworld\n")
    assert source.size(ref=ref) == 12
    assert source.read(ref=ref, offset=6, limit=100) == b"world\n"
    assert source.read(ref=ref, offset=12, limit=100) == b""


# -- the tenant's and project's settings, through the API ------------------------------------


def test_owners_set_the_registries_and_admins_the_projects_default_cluster(acme, cluster, k8s):
    tenant_url = reverse("tenant-detail", kwargs={"pk": acme.tenant.pk})
    owner = acme.client(Role.OWNER)
    bad = owner.patch(tenant_url, {"image_registries": ["ok.example.com", "https://x"]})
    assert bad.status_code == 400
    assert list(fields(bad)["image_registries"]) == ["1"]
    refused = acme.client(Role.ADMIN).patch(tenant_url, {"image_registries": ["x.io"]})
    assert refused.status_code == 403
    body = {"image_registries": ["Registry.Example.com/team/"], "default_cluster": "kube"}
    response = owner.patch(tenant_url, body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["image_registries"] == ["registry.example.com/team"]
    assert response.json()["default_cluster"] == "kube"
    assert post(acme, minimal(acme.project)).json()["cluster"] == "kube"
    project_url = reverse("project-detail", kwargs={"pk": acme.project.pk})
    admin = acme.client(Role.ADMIN)
    unknown = admin.patch(project_url, {"default_cluster": "nowhere"}, format="json")
    assert unknown.status_code == 400 and "default_cluster" in fields(unknown)
    moved = admin.patch(project_url, {"default_cluster": cluster.name}, format="json")
    assert moved.status_code == 200 and moved.json()["default_cluster"] == cluster.name
    assert post(acme, minimal(acme.project)).json()["cluster"] == cluster.name


def test_a_kubernetes_cluster_without_a_default_image_needs_one_in_the_spec(acme, cluster, k8s):
    k8s.config = {"api_url": "https://127.0.0.1:9"}
    k8s.save()
    response = post(acme, minimal(acme.project, cluster="kube"))
    assert response.status_code == 400
    assert "has no default image" in fields(response)["environment"]["image"][0]
    acme.tenant.image_registries = ["registry.example.com"]
    acme.tenant.save()
    image = {"type": "container", "image": "registry.example.com/x:1"}
    assert post(acme, minimal(acme.project, cluster="kube", environment=image)).status_code == 201
