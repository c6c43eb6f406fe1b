"""The local Kubernetes control plane (platform/services/components/kubernetes): it answers,
the platform's identity holds exactly the rights the backend needs (platform/kubernetes/
platform-rbac.yaml), the fake GPU nodes are Ready, Kueue's webhook suspends a queued Job and
its controller admits it, persistent volumes bind, pod logs answer, and job uids cannot reach it.
"""

import io
import json
import os
import re
import signal
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from apps.compute.models import Backend, Cluster
from tests.kubernetes.conftest import etcd_compact

JOB = ["setpriv", "--reuid=250000", "--regid=350000", "--clear-groups", "--"]  # a job's uid
COMPONENT = Path(settings.BASE_DIR) / "platform" / "services" / "components" / "kubernetes"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# kwok runs each stage at once (delay = jitter = 0), completion after a second
FAST = {
    f"{stage}.stage.kwok.x-k8s.io/{knob}": ("1s" if stage == "pod-complete" else "0s")
    for stage in ("pod-create", "pod-ready", "pod-complete")
    for knob in ("delay", "jitter-delay")
}


def node_groups() -> list[tuple[str, int, int, str]]:
    """TORUS_K8S_NODES as the component reads it: POOL:COUNT:GPUS:PRODUCT, comma separated."""
    raw = os.environ.get("TORUS_K8S_NODES", "gpu:4:8:NVIDIA-H100-80GB-HBM3")
    groups = []
    for group in raw.split(","):
        pool, count, gpus, product = group.split(":")
        groups.append((pool, int(count), int(gpus), product))
    return groups


def wait_until(what: str, check, *, timeout: float = 120):
    """Poll CHECK until it returns something truthy; fail naming WHAT after TIMEOUT."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not after {timeout}s"
        time.sleep(0.2)


def forbidden(call) -> int:
    with pytest.raises(ApiException) as info:
        call()
    return info.value.status


def gpu_job(name: str, *, gpus: int, pods: int = 1, queue: str | None = None) -> client.V1Job:
    labels = {QUEUE_LABEL: queue} if queue else {}
    container = client.V1Container(
        name="train",
        image="registry.invalid/torus/runtime:latest",
        command=["python", "train.py"],
        resources=client.V1ResourceRequirements(
            requests={"cpu": "1", "nvidia.com/gpu": str(gpus)},
            limits={"nvidia.com/gpu": str(gpus)},
        ),
    )
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1JobSpec(
            parallelism=pods,
            completions=pods,
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(annotations=FAST),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[container],
                    # the component's nodes (other tests may add their own)
                    node_selector={"torus.io/fake-node": "true"},
                ),
            ),
        ),
    )


def job_condition(batch: client.BatchV1Api, name: str, namespace: str, kind: str) -> bool:
    job = batch.read_namespaced_job(name, namespace)
    return any(c.type == kind and c.status == "True" for c in job.status.conditions or [])


def test_the_component_reports_the_control_plane_up():
    done = subprocess.run([COMPONENT, "status"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    nodes = sum(count for _, count, _, _ in node_groups())
    assert re.fullmatch(
        rf"kubernetes\s+up\s+127\.0\.0\.1:\d+ \(v1\.36\.3, kwok {nodes} nodes, kueue v0\.17\.0\)\n",
        done.stdout,
    ), done.stdout


def test_the_admin_credentials_reach_a_v1_36_apiserver_and_etcd_answers(kube_admin, kube_env):
    assert client.VersionApi(kube_admin).get_code().git_version == "v1.36.3"
    # admin may read what the platform may not
    client.CoreV1Api(kube_admin).list_namespaced_secret("kube-system")
    health = httpx.get(f"{kube_env.etcd_url}/health", timeout=5).json()
    assert health["health"] == "true"


def read_as(prefix: list[str], path: str) -> str:
    """'ok' or the errno name of opening PATH as the user PREFIX switches to."""
    code = "import errno, sys\ntry:\n    open(sys.argv[1], 'rb').close(); print('ok')\n"
    code += "except OSError as exc:\n    print(errno.errorcode[exc.errno])\n"
    done = subprocess.run(
        [*prefix, "/usr/bin/python3", "-c", code, path],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        check=True,
    )
    return done.stdout.strip()


TORUS = ["setpriv", "--reuid=torus", "--regid=torus", "--init-groups", "--"]


def test_the_platform_reads_its_token_and_the_ca_and_a_job_uid_reads_no_token(kube_env):
    """The portal and workers (user torus) read the CA and the platform's token; a job's uid
    reads neither token; the admin's credentials are root's alone."""
    assert oct(Path(kube_env.token_file).stat().st_mode & 0o777) == "0o640"
    assert oct(Path(kube_env.admin_kubeconfig).stat().st_mode & 0o777) == "0o600"
    assert Path(kube_env.ca_file).read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert kube_env.api_url.startswith("https://127.0.0.1:")
    admin_token = str(Path(settings.VAR_DIR, "secrets", "k8s-admin-token"))
    assert read_as(TORUS, kube_env.token_file) == "ok"
    assert read_as(TORUS, kube_env.ca_file) == "ok"
    assert read_as(TORUS, admin_token) == "EACCES"
    assert read_as(TORUS, kube_env.admin_kubeconfig) == "EACCES"
    for secret in (kube_env.token_file, admin_token, kube_env.admin_kubeconfig):
        assert read_as(JOB, secret) == "EACCES", secret


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("TORUS_K8S_NODES", "gpu:4:8"),
        ("TORUS_K8S_NODES", "gpu:0:8:H100"),
        ("TORUS_K8S_NODES", "GPU:1:8:H100"),
        ("TORUS_K8S_NODES", 'gpu:1:8:H100"; touch /tmp/x'),
        ("TORUS_K8S_NODES", "gpu:1:8:H100,"),
        ("TORUS_K8S_NODE_MEMORY", "1Gi;x"),
        ("TORUS_K8S_API_PORT", "99999"),
        ("TORUS_K8S_KUEUE_WEBHOOK_PORT", "x"),
    ],
)
def test_the_component_refuses_a_malformed_setting_naming_it(variable, value):
    """Values rendered into manifests and command lines are checked first."""
    done = subprocess.run(
        [COMPONENT, "status"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, variable: value},
    )
    assert done.returncode == 1
    assert variable in done.stderr


def test_kwok_runs_the_fake_gpu_nodes_ready_with_their_labels(kube_admin):
    nodes = client.CoreV1Api(kube_admin).list_node(label_selector="torus.io/fake-node=true").items
    expected = {
        f"kwok-{pool}-{i}": (pool, gpus, product)
        for pool, count, gpus, product in node_groups()
        for i in range(count)
    }
    assert {n.metadata.name for n in nodes} == set(expected)
    for node in nodes:
        pool, gpus, product = expected[node.metadata.name]
        ready = [c.status for c in node.status.conditions if c.type == "Ready"]
        assert ready == ["True"], node.metadata.name
        assert node.status.allocatable["nvidia.com/gpu"] == str(gpus)
        assert node.metadata.labels["torus.io/pool"] == pool
        assert node.metadata.labels["nvidia.com/gpu.product"] == product
        # the not-ready taint went (the node lifecycle controller runs)
        assert not [t for t in node.spec.taints or [] if "not-ready" in t.key]
        # both addresses (the apiserver proxies pods/log to InternalIP:kubelet port)
        addresses = {a.type: a.address for a in node.status.addresses}
        assert addresses == {"InternalIP": "127.0.0.1", "Hostname": node.metadata.name}
    # kwok renews each node's lease, so the node lifecycle controller keeps them Ready
    leases = client.CoordinationV1Api(kube_admin).list_namespaced_lease("kube-node-lease").items
    assert set(expected) <= {lease.metadata.name for lease in leases}
    flavors = client.CustomObjectsApi(kube_admin).list_cluster_custom_object(
        *KUEUE, "resourceflavors"
    )["items"]
    names = {f["metadata"]["name"] for f in flavors}
    assert {f"{pool}-{product.lower()}" for pool, _, _, product in node_groups()} <= names


ALLOWED = [
    ("create", "", "namespaces", None, None),
    ("create", "batch", "jobs", "tenant-x", None),
    ("delete", "batch", "jobs", "tenant-x", None),
    ("watch", "", "pods", "tenant-x", None),
    ("get", "", "pods", "tenant-x", "log"),
    ("create", "", "services", "tenant-x", None),
    ("create", "", "resourcequotas", "tenant-x", None),
    ("update", "networking.k8s.io", "networkpolicies", "tenant-x", None),
    ("create", "", "persistentvolumeclaims", "tenant-x", None),
    ("create", "", "persistentvolumes", None, None),
    ("list", "", "nodes", None, None),
    ("create", "kueue.x-k8s.io", "clusterqueues", None, None),
    ("create", "kueue.x-k8s.io", "localqueues", "tenant-x", None),
    ("watch", "kueue.x-k8s.io", "workloads", "tenant-x", None),
    ("list", "visibility.kueue.x-k8s.io", "clusterqueues", None, "pendingworkloads"),
]
DENIED = [
    ("get", "", "secrets", "kube-system", None),
    ("list", "", "secrets", "tenant-x", None),
    ("create", "", "pods", "tenant-x", "exec"),
    ("get", "", "pods", "tenant-x", "exec"),
    ("create", "", "pods", "tenant-x", "attach"),
    ("create", "", "pods", "tenant-x", None),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", None, None),
    ("create", "rbac.authorization.k8s.io", "rolebindings", "tenant-x", None),
    ("bind", "rbac.authorization.k8s.io", "clusterroles", None, None),
    ("escalate", "rbac.authorization.k8s.io", "roles", "tenant-x", None),
    ("impersonate", "", "users", None, None),
    ("delete", "", "namespaces", None, None),
    ("delete", "", "nodes", None, None),
    ("update", "", "nodes", None, "status"),
    ("create", "", "serviceaccounts", "tenant-x", "token"),
    ("update", "kueue.x-k8s.io", "workloads", "tenant-x", "status"),
    ("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", None, None),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", None, None),
]


def can(api: client.ApiClient, verb, group, resource, namespace, subresource) -> bool:
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb,
                group=group,
                resource=resource,
                namespace=namespace,
                subresource=subresource,
            )
        )
    )
    return client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed


@pytest.mark.parametrize("attributes", ALLOWED, ids=lambda a: "-".join(filter(None, a)))
def test_the_platform_may_do_what_the_backend_needs(kube_platform, attributes):
    assert can(kube_platform, *attributes)


@pytest.mark.parametrize("attributes", DENIED, ids=lambda a: "-".join(filter(None, a)))
def test_the_platform_may_not_touch_secrets_rbac_exec_or_the_cluster(kube_platform, attributes):
    assert not can(kube_platform, *attributes)


def test_the_platform_token_creates_a_job_but_is_refused_secrets_rbac_and_exec(
    kube_platform, kube_admin
):
    core, batch = client.CoreV1Api(kube_platform), client.BatchV1Api(kube_platform)
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=namespace, labels={"torus.io/test": "true"})
        )
    )
    try:
        batch.create_namespaced_job(namespace, gpu_job("train", gpus=1))
        pod = wait_until(
            "the job's pod",
            lambda: core.list_namespaced_pod(namespace, label_selector="job-name=train").items,
        )[0]
        assert forbidden(lambda: core.list_namespaced_secret("kube-system")) == 403
        assert forbidden(lambda: core.read_namespaced_secret("any", "kube-system")) == 403
        binding = client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=f"t-{uuid.uuid4().hex[:8]}"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(
                    api_group="rbac.authorization.k8s.io", kind="User", name="torus-platform"
                )
            ],
        )
        rbac = client.RbacAuthorizationV1Api(kube_platform)
        assert forbidden(lambda: rbac.create_cluster_role_binding(binding)) == 403
        # a plain POST to pods/exec: refused by RBAC before any stream is opened
        exec_ = lambda: core.connect_post_namespaced_pod_exec(  # noqa: E731
            pod.metadata.name, namespace, command=["sh"], stdout=True
        )
        assert forbidden(exec_) == 403
        # and the job runs to completion on a fake node
        wait_until("job Complete", lambda: job_condition(batch, "train", namespace, "Complete"))
    finally:
        client.CoreV1Api(kube_admin).delete_namespace(namespace, propagation_policy="Background")


def test_a_pods_log_answers_through_the_apiserver_with_the_platform_token(
    kube_platform, kube_namespace
):
    core, batch = client.CoreV1Api(kube_platform), client.BatchV1Api(kube_platform)
    batch.create_namespaced_job(kube_namespace, gpu_job("logs", gpus=2))
    wait_until("job Complete", lambda: job_condition(batch, "logs", kube_namespace, "Complete"))
    pod = core.list_namespaced_pod(kube_namespace, label_selector="job-name=logs").items[0]
    assert pod.spec.node_name.startswith("kwok-")
    log = core.read_namespaced_pod_log(pod.metadata.name, kube_namespace)
    assert log == "epoch 1 loss=0.93\nepoch 2 loss=0.41\n"


@pytest.fixture
def cluster_queue(kube_admin):
    """A ClusterQueue of 8 GPUs of the first pool's flavor; deleted afterwards."""
    pool, _, _, product = node_groups()[0]
    name = f"t-{uuid.uuid4().hex[:10]}"
    body = {
        "apiVersion": "/".join(KUEUE),
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": f"{pool}-{product.lower()}",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "nvidia.com/gpu", "nominalQuota": "8"},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    objects = client.CustomObjectsApi(kube_admin)
    objects.create_cluster_custom_object(*KUEUE, "clusterqueues", body)
    yield name
    objects.delete_cluster_custom_object(*KUEUE, "clusterqueues", name)


def test_kueue_suspends_a_queued_job_and_admits_it_within_quota(
    kube_platform, kube_namespace, cluster_queue
):
    objects = client.CustomObjectsApi(kube_platform)
    batch = client.BatchV1Api(kube_platform)
    local_queue = {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": "jobs", "namespace": kube_namespace},
        "spec": {"clusterQueue": cluster_queue},
    }
    objects.create_namespaced_custom_object(*KUEUE, kube_namespace, "localqueues", local_queue)
    first = batch.create_namespaced_job(
        kube_namespace, gpu_job("first", gpus=4, pods=2, queue="jobs")
    )
    second = batch.create_namespaced_job(
        kube_namespace, gpu_job("second", gpus=4, pods=2, queue="jobs")
    )
    # Kueue's mutating webhook (over the loopback) suspended both on create
    assert first.spec.suspend is True
    assert second.spec.suspend is True

    def admitted(name):
        return not batch.read_namespaced_job(name, kube_namespace).spec.suspend

    wait_until("first admitted", lambda: admitted("first"))
    workloads = objects.list_namespaced_custom_object(*KUEUE, kube_namespace, "workloads")
    states = {
        w["metadata"]["ownerReferences"][0]["name"]: {
            c["type"] for c in w["status"].get("conditions", []) if c["status"] == "True"
        }
        for w in workloads["items"]
    }
    assert "Admitted" in states["first"]
    # 8 GPUs of quota: the second waits for the first to finish, then runs
    assert "Admitted" not in states.get("second", set())
    assert not admitted("second")
    wait_until("first Complete", lambda: job_condition(batch, "first", kube_namespace, "Complete"))
    wait_until("second admitted", lambda: admitted("second"))
    wait_until(
        "second Complete", lambda: job_condition(batch, "second", kube_namespace, "Complete")
    )


def test_kueue_validates_its_objects_through_the_webhook(kube_platform, kube_namespace):
    bad = {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": "bad", "namespace": kube_namespace},
        "spec": {"clusterQueue": "Not_A_Name"},
    }
    objects = client.CustomObjectsApi(kube_platform)
    status = forbidden(
        lambda: objects.create_namespaced_custom_object(*KUEUE, kube_namespace, "localqueues", bad)
    )
    assert status in (400, 422)


def test_a_claim_binds_to_a_volume_the_platform_made(kube_platform, kube_namespace, kube_admin):
    """The persistentvolume-binder runs: the backend binds claims to volumes it creates."""
    core = client.CoreV1Api(kube_platform)
    name = f"t-{uuid.uuid4().hex[:10]}"
    volume = client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=name, labels={"torus.io/test": "true"}),
        spec=client.V1PersistentVolumeSpec(
            capacity={"storage": "1Gi"},
            access_modes=["ReadWriteMany"],
            storage_class_name="",
            host_path=client.V1HostPathVolumeSource(path=f"/nonexistent/{name}"),
            claim_ref=client.V1ObjectReference(namespace=kube_namespace, name="data"),
        ),
    )
    core.create_persistent_volume(volume)
    try:
        claim = client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="data"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                volume_name=name,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        )
        core.create_namespaced_persistent_volume_claim(kube_namespace, claim)
        wait_until(
            "claim Bound",
            lambda: (
                core.read_namespaced_persistent_volume_claim("data", kube_namespace).status.phase
                == "Bound"
            ),
        )
    finally:
        client.CoreV1Api(kube_admin).delete_persistent_volume(name)


def test_the_visibility_server_gives_pending_positions_to_the_platform(
    kube_env, kube_admin, kube_platform, kube_namespace, cluster_queue
):
    """Kueue's visibility API on its own loopback port (TORUS_K8S_VISIBILITY_URL), with the
    platform's token (authentication and authorization delegated to the apiserver)."""
    assert kube_env.visibility_url, "TORUS_K8S_VISIBILITY_URL is empty: see .var/log/k8s-kueue.log"
    # a held queue admits nothing: both jobs stay pending, in order
    client.CustomObjectsApi(kube_admin).patch_cluster_custom_object(
        *KUEUE, "clusterqueues", cluster_queue, {"spec": {"stopPolicy": "Hold"}}
    )
    local_queue = {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": "jobs", "namespace": kube_namespace},
        "spec": {"clusterQueue": cluster_queue},
    }
    client.CustomObjectsApi(kube_platform).create_namespaced_custom_object(
        *KUEUE, kube_namespace, "localqueues", local_queue
    )
    batch = client.BatchV1Api(kube_platform)
    for name in ("a", "b"):
        batch.create_namespaced_job(kube_namespace, gpu_job(name, gpus=1, queue="jobs"))
    tls = ssl.create_default_context(cafile=kube_env.ca_file)
    base = f"{kube_env.visibility_url}/apis/visibility.kueue.x-k8s.io/v1beta2"
    url = f"{base}/clusterqueues/{cluster_queue}/pendingworkloads"

    def pending():
        answer = httpx.get(
            url, headers={"Authorization": f"Bearer {kube_env.platform_token}"}, verify=tls
        )
        assert answer.status_code == 200, answer.text
        items = answer.json()["items"]
        return items if len(items) == 2 else None

    items = wait_until("two pending workloads", pending)
    positions = {
        w["metadata"]["ownerReferences"][0]["name"]: (
            w["positionInClusterQueue"],
            w["positionInLocalQueue"],
        )
        for w in items
    }
    # one queue position each (created in the same second, their order is Kueue's tie-break)
    assert set(positions) == {"a", "b"}
    assert sorted(positions.values()) == [(0, 0), (1, 1)]
    # no token: refused
    assert httpx.get(url, verify=tls).status_code in (401, 403)


PROBE = (
    "import errno, json, socket, sys\n"
    "out = {}\n"
    "for port in sys.argv[1:]:\n"
    "    try:\n"
    "        socket.create_connection(('127.0.0.1', int(port)), timeout=5).close()\n"
    "        out[port] = 'ok'\n"
    "    except OSError as exc:\n"
    "        out[port] = errno.errorcode.get(exc.errno, str(exc))\n"
    "print(json.dumps(out))\n"
)


def test_a_job_uid_is_refused_at_the_control_planes_ports(kube_env):
    ports = [
        kube_env.api_url.rsplit(":", 1)[1],
        kube_env.etcd_url.rsplit(":", 1)[1],
        os.environ.get("TORUS_K8S_KUEUE_WEBHOOK_PORT", "19443"),
        os.environ.get("TORUS_K8S_KWOK_PORT", "20247"),
    ]

    def probe(prefix):
        done = subprocess.run(
            [*prefix, "/usr/bin/python3", "-c", PROBE, *ports],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
            check=True,
        )
        return json.loads(done.stdout)

    assert probe([]) == dict.fromkeys(ports, "ok")
    assert probe(JOB) == dict.fromkeys(ports, "ECONNREFUSED")


def test_the_apiserver_restarts_alone_and_a_compacted_version_is_gone(
    kube_admin, kube_platform, kube_env
):
    """restart-apiserver restarts it alone; after an etcd compaction (TORUS_K8S_ETCD_URL) a
    list at a version from before answers 410 Gone, which the backend's watch must survive."""
    core = client.CoreV1Api(kube_admin)
    old = core.list_namespace(limit=1).metadata.resource_version
    # a write moves the revision on; the compaction then passes the old version
    made = core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(generate_name="t-", labels={"torus.io/test": "true"})
        )
    )
    core.delete_namespace(made.metadata.name)
    assert etcd_compact(kube_env) > int(old)
    before = {
        name: Path(settings.VAR_DIR, "run", f"k8s-{name}.pid").read_text()
        for name in ("etcd", "kube-apiserver", "kueue", "kwok")
    }
    done = subprocess.run(
        [COMPONENT, "restart-apiserver"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    after = {name: Path(settings.VAR_DIR, "run", f"k8s-{name}.pid").read_text() for name in before}
    assert after["kube-apiserver"] != before["kube-apiserver"]
    assert {k: v for k, v in after.items() if k != "kube-apiserver"} == {
        k: v for k, v in before.items() if k != "kube-apiserver"
    }
    assert client.VersionApi(kube_admin).get_code().git_version == "v1.36.3"
    # ready means RBAC answers too (while it starts, the platform gets 403s)
    assert client.CoreV1Api(kube_platform).list_node().items
    # the fresh watch cache starts after the compaction: the old version comes from etcd
    gone = forbidden(
        lambda: core.list_namespace(resource_version=old, resource_version_match="Exact", limit=1)
    )
    assert gone == 410


def test_cluster_register_local_registers_the_kubernetes_cluster_beside_slurm(
    transactional_db, kube_env
):
    call_command("cluster_register_local", verbosity=0)
    slurm, k8s = Cluster.objects.get(name="local"), Cluster.objects.get(name="local-k8s")
    assert (slurm.backend, slurm.is_default) == (Backend.SLURM, True)
    assert (k8s.backend, k8s.is_default, k8s.supports_containers) == (
        Backend.KUBERNETES,
        False,
        True,
    )
    # jobs' egress never reaches this machine's own addresses (the platform's services)
    deny = k8s.config.pop("egress_deny_cidrs")
    assert "127.0.0.0/8" in deny and "::1/128" in deny
    assert k8s.config == {
        "api_url": kube_env.api_url,
        "ca_file": kube_env.ca_file,
        "token_file": kube_env.token_file,
        "namespace_per": "tenant",
        "storage_class": "",
        "kueue": True,
        "default_image": "registry.invalid/torus/runtime:latest",
        "visibility_url": kube_env.visibility_url,
    }
    # synced: the fake nodes are the cluster's nodes
    assert {f"kwok-{p}-{i}" for p, n, _, _ in node_groups() for i in range(n)} <= set(
        k8s.nodes.values_list("name", flat=True)
    )
    # idempotent
    call_command("cluster_register_local", "--backend", "kubernetes", verbosity=0)
    assert Cluster.objects.filter(name="local-k8s").count() == 1


def daemon_pids() -> dict[str, str]:
    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kueue")
    return {n: Path(settings.VAR_DIR, "run", f"k8s-{n}.pid").read_text() for n in names}


def component(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([COMPONENT, *args], capture_output=True, text=True, timeout=300)


def test_start_again_restarts_nothing():
    before = daemon_pids()
    done = component("start")
    assert done.returncode == 0, done.stderr
    assert "restarting" not in done.stderr
    assert daemon_pids() == before


def test_a_daemon_that_died_is_reported_and_started_again_alone():
    before = daemon_pids()
    os.kill(int(before["kube-scheduler"]), signal.SIGTERM)
    wait_until("the scheduler gone", lambda: component("status").returncode == 1)
    down = component("status")
    assert down.stdout.split() == ["kubernetes", "down", "(kube-scheduler", "not", "running)"]
    done = component("start")
    assert done.returncode == 0, done.stderr
    after = daemon_pids()
    assert after["kube-scheduler"] != before["kube-scheduler"]
    assert {k: v for k, v in after.items() if k != "kube-scheduler"} == {
        k: v for k, v in before.items() if k != "kube-scheduler"
    }
    assert component("status").returncode == 0


def test_kwoks_chaos_stage_fails_a_labelled_pod_with_exit_code_1(kube_platform, kube_namespace):
    batch, core = client.BatchV1Api(kube_platform), client.CoreV1Api(kube_platform)
    job = gpu_job("fails", gpus=1)
    job.spec.template.metadata.labels = {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"}
    batch.create_namespaced_job(kube_namespace, job)
    wait_until("job Failed", lambda: job_condition(batch, "fails", kube_namespace, "Failed"))
    pod = core.list_namespaced_pod(kube_namespace, label_selector="job-name=fails").items[0]
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 1


def test_a_pod_asking_more_gpus_than_a_node_has_stays_pending(kube_platform, kube_namespace):
    batch, core = client.BatchV1Api(kube_platform), client.CoreV1Api(kube_platform)
    most = max(gpus for _, _, gpus, _ in node_groups())
    batch.create_namespaced_job(kube_namespace, gpu_job("too-big", gpus=most + 1))

    def unschedulable():
        pods = core.list_namespaced_pod(kube_namespace, label_selector="job-name=too-big").items
        scheduled = [c for p in pods for c in p.status.conditions or [] if c.type == "PodScheduled"]
        return [c for c in scheduled if c.reason == "Unschedulable"]

    (condition,) = wait_until("the scheduler's verdict", unschedulable)
    assert "Insufficient nvidia.com/gpu" in condition.message


def test_the_platform_service_account_has_the_platforms_role(kube_admin):
    """torus-system/torus-platform (for a platform that runs in a cluster) is bound too."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user="system:serviceaccount:torus-system:torus-platform",
            groups=["system:serviceaccounts", "system:serviceaccounts:torus-system"],
            resource_attributes=client.V1ResourceAttributes(
                verb="create", group="batch", resource="jobs", namespace="tenant-x"
            ),
        )
    )
    api = client.AuthorizationV1Api(kube_admin)
    assert api.create_subject_access_review(review).status.allowed
    review.spec.resource_attributes = client.V1ResourceAttributes(
        verb="get", resource="secrets", namespace="kube-system"
    )
    assert not api.create_subject_access_review(review).status.allowed


def test_a_kubernetes_cluster_that_does_not_answer_does_not_stop_slurms_registration(
    transactional_db, monkeypatch
):
    """Beside Slurm (the default) the Kubernetes cluster is optional: kept, unhealthy, named
    on stderr; asked for alone, it is an error."""
    monkeypatch.setenv("TORUS_K8S_API_URL", "https://127.0.0.1:9")
    err = io.StringIO()
    call_command("cluster_register_local", verbosity=0, stdout=io.StringIO(), stderr=err)
    assert Cluster.objects.get(name="local").healthy
    k8s = Cluster.objects.get(name="local-k8s")
    assert not k8s.healthy and k8s.last_error
    assert "cluster local-k8s did not answer" in err.getvalue()
    with pytest.raises(CommandError, match="local-k8s did not answer"):
        call_command("cluster_register_local", "--backend", "kubernetes", stdout=io.StringIO())
