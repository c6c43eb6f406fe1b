"""The Kubernetes backend on the real local control plane (etcd, apiserver, controller
manager, scheduler, kwok, Kueue): manifests against the apiserver's schema, the lifecycle of
one- and two-node jobs, gang admission, quota mirroring, a pod killed, a node lost, a watch
broken and resumed, 410 Gone, the apiserver restarted and tenants kept apart.

Each test has its own tenant, Cluster row and kwok nodes in a pool of its own, so tests of
other modules using the shared fake nodes are not disturbed. kwok runs no process: pods walk
through their phases on kwok's timers (the cluster config sets them), and a pod's death is
made by patching its status as a kubelet would."""

import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from kubernetes import client

from apps.compute.backends.base import SubmitRejected
from apps.compute.backends.kubernetes import manifests, names, places
from apps.compute.backends.kubernetes.backend import KubernetesBackend
from apps.compute.backends.kubernetes.client import ApiError, KubeClient
from apps.compute.backends.kubernetes.watch import SELECTORS
from tests.kubernetes.kube_helpers import (
    add_node,
    cluster_view,
    delete_tenant_objects,
    forget_pools,
    make_cluster,
    record_of,
    served,
    start_watch,
    submission,
    wait_for,
    wait_state,
)

ROOT = Path(__file__).resolve().parents[2]
LONG = {"pod-create": "0s", "pod-ready": "0s", "pod-complete": "600s"}
# After an apiserver restart every informer of Kueue, the controller-manager, the scheduler
# and kwok reconnects with client-go's back-off (doubling from 0.8 s to 30 s, up to twice that
# with jitter, reset only after 2 minutes without a failure), then waits one more step before
# it relists after the 410: a job can wait minutes for Kueue to see it (docs/kubernetes.md).
RECOVERY = 300


@pytest.fixture
def k8s(db, kube_env, kube_admin, tmp_path):
    """A tenant of its own, a Cluster row, a pool with one 8-GPU node and a watcher."""
    made = SimpleNamespace(tenant=f"kd{uuid.uuid4().hex[:8]}", project="vision", nodes=[])
    made.job_root = str(tmp_path / "jobs")
    made.pool = f"p{uuid.uuid4().hex[:8]}"

    def setup(**config):
        made.cluster = make_cluster(kube_env, job_root=made.job_root, **config)
        made.backend = KubernetesBackend(made.cluster)
        made.watch = start_watch(made.backend)
        return made

    def node(pool=None, gpus=8):
        name = add_node(kube_admin, pool=pool or made.pool, gpus=gpus)
        made.nodes.append(name)
        if hasattr(made, "cluster"):
            forget_pools(made.cluster)
        return name

    def sub(**overrides):
        return submission(
            tenant=made.tenant,
            project=made.project,
            job_root=made.job_root,
            partition=made.pool,
            **overrides,
        )

    made.setup, made.node, made.sub = setup, node, sub
    yield made
    if hasattr(made, "watch"):
        made.watch.stop()
        made.backend.store.clear()
    delete_tenant_objects(kube_admin, made.tenant)
    core = client.CoreV1Api(kube_admin)
    for name in made.nodes:
        try:
            served(core.delete_node, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def pods_of(kube_admin, backend_id: str) -> list:
    ns, name = backend_id.split("/")
    return (
        client.CoreV1Api(kube_admin)
        .list_namespaced_pod(ns, label_selector=f"job-name={name}")
        .items
    )


def test_every_manifest_kind_passes_the_apiservers_schema_strictly(k8s, kube_env):
    k8s.node()
    k8s.setup()
    b = k8s.backend
    ns = b.ensure_place(tenant=k8s.tenant, project=k8s.project)
    kube = KubeClient(b.settings)  # the platform's own token: RBAC allows every kind
    s = b.settings
    single = manifests.job(settings=s, submission=k8s.sub())[1]
    indexed = manifests.job(settings=s, submission=k8s.sub(nodes=2))[1]
    objects = [
        *b.place_objects(tenant=k8s.tenant, project=k8s.project),
        places.cluster_queue(
            settings=s, tenant=k8s.tenant, pools=[k8s.pool], resources=["nvidia.com/gpu"], gpus=8
        ),
        places.resource_quota(namespace=ns, resource="nvidia.com/gpu", gpus=8),
        single,
        indexed,
        manifests.service(job=indexed, owner_uid=str(uuid.uuid4())),
    ]
    kinds = set()
    for obj in objects:  # fieldValidation=Strict: an unknown field is an error
        if obj["kind"] in ("Job", "Service"):  # created, as submit() does
            kube.create(obj, dry_run=True)
        else:  # applied, as ensure_place() and tenant_gpu_limit() do
            kube.apply(obj, dry_run=True)
        kinds.add(obj["kind"])
    assert kinds == {
        "Namespace", "NetworkPolicy", "ResourceFlavor", "PersistentVolume",
        "PersistentVolumeClaim", "LocalQueue", "ClusterQueue", "ResourceQuota", "Job", "Service",
    }  # fmt: skip
    bogus = {**single, "spec": {**single["spec"], "privileged": True}}
    with pytest.raises(SubmitRejected, match="unknown field"):
        kube.create(bogus, dry_run=True)
    # the apiserver agrees with the boundary: the names the backend makes are accepted
    assert names.DNS_LABEL.fullmatch(single["metadata"]["name"])


def test_single_node_lifecycle(k8s, kube_admin):
    node = k8s.node()
    b = k8s.setup().backend
    sub = k8s.sub()
    backend_id = b.submit(sub)
    assert backend_id == f"torus-{k8s.tenant}/{manifests.job_name(tag=sub.tag)}"
    assert b.submit(sub) == backend_id  # a retried submit finds the Job it made
    seen = set()

    def finished():
        found = record_of(b, sub.tag)
        if found:
            seen.add(found.state)
        return found if found and found.state == "Succeeded" else None

    done = wait_for(finished, what="the job to succeed", interval=0.05)
    assert "Running" in seen
    assert b.attempt_outcome(done) == "SUCCEEDED"
    assert done.exit_code == 0 and done.nodes == [node] and done.backend_id == backend_id
    assert done.started_at and done.ended_at and done.order > 0
    (pod,) = pods_of(kube_admin, backend_id)
    assert pod.spec.security_context.run_as_user == 20001
    assert pod.spec.security_context.run_as_non_root is True
    container = pod.spec.containers[0]
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]
    # the pod's log through the API, by byte offsets (kwok serves a fixed log)
    source = b.log_source()
    from apps.compute.backends.base import LogRef

    ref = LogRef(tag=sub.tag, backend_id=backend_id, stream="stdout", path="")
    whole = source.read(ref=ref, offset=0, limit=1 << 20)
    assert b"epoch 1" in whole and source.size(ref=ref) == len(whole)
    assert source.read(ref=ref, offset=5, limit=3) == whole[5:8]


def test_two_node_job_is_one_indexed_job_with_a_headless_service(k8s, kube_admin):
    nodes = {k8s.node(gpus=4), k8s.node(gpus=4)}
    b = k8s.setup(kwok_delays={"pod-create": "0s", "pod-ready": "0s", "pod-complete": "3s"}).backend
    sub = k8s.sub(nodes=2, tasks_per_node=2)
    backend_id = b.submit(sub)
    ns, name = backend_id.split("/")
    running = wait_state(b, sub.tag, {"Running", "Succeeded"})
    svc = client.CoreV1Api(kube_admin).read_namespaced_service(name, ns)
    assert svc.spec.cluster_ip == "None"
    assert svc.metadata.owner_references[0].name == name
    pods = pods_of(kube_admin, backend_id)
    assert sorted(
        p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods
    ) == ["0", "1"]
    assert {p.spec.subdomain for p in pods} == {name}
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    assert env["TORUS_MASTER_ADDR"] == f"{name}-0.{name}.{ns}.svc"
    assert env["TORUS_NNODES"] == "2" and env["TORUS_TASKS_PER_NODE"] == "2"
    done = wait_state(b, sub.tag, {"Succeeded"})
    assert set(done.nodes) == nodes == set(running.nodes or done.nodes)
    assert b.attempt_outcome(done) == "SUCCEEDED"


def test_gang_admission_waits_whole_with_reason_and_position(k8s, kube_admin):
    k8s.node(gpus=8)
    b = k8s.setup(kwok_delays=LONG).backend
    b.ensure_place(tenant=k8s.tenant, project=k8s.project)
    b.tenant_gpu_limit(tenant=k8s.tenant, account="", gpus=8)
    first = k8s.sub(nodes=2, accelerators_per_node=8)
    second = k8s.sub(nodes=2, accelerators_per_node=8)
    for sub in (first, second):
        b.submit(sub)
        time.sleep(1.1)  # creation order is queue order (creation times are in seconds)
    waiting = [wait_state(b, s.tag, {"Queued"}) for s in (first, second)]
    wait_for(
        lambda: all((record_of(b, s.tag) or waiting[0]).queue_position for s in (first, second)),
        what="queue positions",
    )
    found = {s.tag: record_of(b, s.tag) for s in (first, second)}
    assert [found[s.tag].queue_position for s in (first, second)] == [1, 2]
    if k8s.backend.settings.visibility_url:  # the positions were Kueue's own
        wait_for(lambda: k8s.watch.counters["visibility_requests"], what="the visibility API")
        assert not k8s.watch.counters["visibility_errors"]
    message = b.waiting_message(found[second.tag])
    assert message.startswith("waiting in Kueue: ") and message.endswith("(position 2)")
    assert "nvidia.com/gpu" in message
    assert b.attempt_outcome(found[first.tag]) == "SUBMITTED"
    for s in (first, second):  # whole: not one pod of either exists
        assert pods_of(kube_admin, record_of(b, s.tag).backend_id) == []
    # one that fits the quota is admitted past them and runs
    small = k8s.sub(nodes=1, accelerators_per_node=8)
    b.submit(small)
    assert wait_state(b, small.tag, {"Running"}).state == "Running"


def test_tenant_gpu_limit_is_mirrored_into_kueue_and_a_resource_quota(k8s, kube_admin):
    k8s.node()
    b = k8s.setup().backend
    ns = b.ensure_place(tenant=k8s.tenant, project=k8s.project)
    custom, core = client.CustomObjectsApi(kube_admin), client.CoreV1Api(kube_admin)

    def gpu_quota():
        cq = custom.get_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "clusterqueues", f"torus-{k8s.tenant}"
        )
        flavors = cq["spec"]["resourceGroups"][0]["flavors"]
        mine = next(f for f in flavors if f["name"] == f"pool-{k8s.pool}")
        gpu = next(r for r in mine["resources"] if r["name"] == "nvidia.com/gpu")
        rq = core.read_namespaced_resource_quota("torus-accelerators", ns)
        return gpu, rq.spec.hard

    b.tenant_gpu_limit(tenant=k8s.tenant, account="", gpus=6)
    gpu, hard = gpu_quota()
    assert (gpu["nominalQuota"], gpu.get("borrowingLimit")) == ("6", "0")
    assert hard == {"requests.nvidia.com/gpu": "6"}
    b.tenant_gpu_limit(tenant=k8s.tenant, account="", gpus=None)
    gpu, hard = gpu_quota()
    assert "borrowingLimit" not in gpu and int(gpu["nominalQuota"]) >= 100000
    assert not hard
    b.tenant_gpu_limit(tenant=k8s.tenant, account="", gpus=4)
    forget_pools(k8s.cluster)
    k8s.node(pool=f"{k8s.pool}-b")  # a new pool: the queue is rebuilt, the limit kept
    KubernetesBackend(k8s.cluster).ensure_place(tenant=k8s.tenant, project=k8s.project)
    gpu, hard = gpu_quota()
    assert (gpu["nominalQuota"], hard) == ("4", {"requests.nvidia.com/gpu": "4"})


def test_a_killed_pod_and_a_deleted_pod(k8s, kube_admin):
    k8s.node()
    b = k8s.setup(kwok_delays=LONG).backend
    core = client.CoreV1Api(kube_admin)
    oom, deleted = k8s.sub(), k8s.sub()
    ids = {s.tag: b.submit(s) for s in (oom, deleted)}
    for s in (oom, deleted):
        wait_state(b, s.tag, {"Running"})
    (pod,) = pods_of(kube_admin, ids[oom.tag])
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_namespaced_pod_status(  # what a kubelet reports for an OOM-killed container
        pod.metadata.name,
        pod.metadata.namespace,
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": pod.spec.containers[0].image,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 137,
                                "reason": "OOMKilled",
                                "startedAt": now,
                                "finishedAt": now,
                            }
                        },
                    }
                ],
            }
        },
    )
    killed = wait_state(b, oom.tag, {"OOMKilled"})
    assert killed.exit_code == 137 and b.attempt_outcome(killed) == "FAILED"
    (pod,) = pods_of(kube_admin, ids[deleted.tag])
    core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    gone = wait_state(b, deleted.tag, {"Evicted", "NodeLost"})
    assert b.attempt_outcome(gone) == "NODE_FAIL"  # retryable: the platform restarts it


def test_a_lost_node_ends_the_attempt_as_node_fail_and_is_reported_unhealthy(k8s, kube_admin):
    lost = k8s.node()
    other = k8s.node()
    b = k8s.setup(kwok_delays=LONG).backend
    sub = k8s.sub(accelerators_per_node=8, exclude_nodes=(other,))
    backend_id = b.submit(sub)
    assert wait_state(b, sub.tag, {"Running"}).nodes == [lost]
    client.CoreV1Api(kube_admin).delete_node(lost)
    k8s.nodes.remove(lost)
    ended = wait_state(b, sub.tag, {"NodeLost"})
    assert b.attempt_outcome(ended) == "NODE_FAIL" and ended.nodes == [lost]
    # the watcher took the Job back (its quota is free); accounting() remembers the outcome
    ns, name = backend_id.split("/")
    wait_for(lambda: record_of(b, sub.tag) is None, what="the Job deleted")
    with pytest.raises(client.ApiException) as caught:
        client.BatchV1Api(kube_admin).read_namespaced_job(name, ns)
    assert caught.value.status == 404
    (remembered,) = b.accounting(tags={sub.tag}, since=None)
    assert remembered.state == "NodeLost"
    _, nodes = b.inventory()
    by_name = {n.name: n for n in nodes}
    assert by_name[lost].healthy is False and by_name[other].healthy is True
    # the next attempt avoids it (the reconciler passes the failed node as exclude_nodes)
    retry = k8s.sub(accelerators_per_node=8, exclude_nodes=(lost,))
    b.submit(retry)
    assert wait_state(b, retry.tag, {"Running"}).nodes == [other]


def resume_from_a_gone_version(watch, kind: str) -> None:
    """Make `kind`'s watch resume from resourceVersion 1 until the apiserver answers 410 Gone.

    The apiserver serves watches from its watch cache, not from etcd: a version is gone when
    it is older than the cache's window (which begins where the cache started: when the
    apiserver started, or, for a custom resource such as Kueue's Workload, when its CRD was
    made), whatever etcd has compacted. So version 1 is gone for Workloads on any apiserver,
    and for Jobs once the apiserver has restarted, but not for Jobs on an apiserver that has
    run since the cluster was made (its Job cache began at version 1)."""
    gone = watch.counters[f"gone:{kind}"]

    def answered_gone() -> bool:
        if watch.counters[f"gone:{kind}"] > gone:
            return True
        # Again until it takes: an event being handled may move the version on, or the
        # stream may be between two connections.
        watch.versions[kind] = "1"
        watch.interrupt(kind)
        return False

    wait_for(answered_gone, what=f"a 410 Gone for {kind}", interval=2)


def test_a_broken_watch_resumes_and_a_410_relists(k8s):
    k8s.node()
    b = k8s.setup(kwok_delays=LONG).backend
    w = k8s.watch
    lists = {kind: w.counters[f"lists:{kind}"] for kind in SELECTORS}
    before = w.counters["resumes:Job"]
    w.interrupt()  # as a network failure would
    first = k8s.sub()
    b.submit(first)
    wait_state(b, first.tag, {"Running"})
    assert w.counters["resumes:Job"] > before
    assert {kind: w.counters[f"lists:{kind}"] for kind in SELECTORS} == lists  # no relist
    # 410 Gone for the Workloads (Kueue's admission of the job) relists them alone
    resume_from_a_gone_version(w, "Workload")
    wait_for(lambda: w.counters["lists:Workload"] > lists["Workload"], what="a relist")
    assert {k: w.counters[f"lists:{k}"] for k in SELECTORS if k != "Workload"} == {
        k: n for k, n in lists.items() if k != "Workload"
    }
    w.wait_synced()
    assert record_of(b, first.tag).state == "Running"  # kept across the relist
    second = k8s.sub()  # and followed after it: admitted (its Workload), then running
    b.submit(second)
    wait_state(b, second.tag, {"Running"})
    assert record_of(b, first.tag).state == "Running"


def test_tenants_are_kept_apart(k8s, kube_admin):
    k8s.node()
    b = k8s.setup().backend
    other = f"kd{uuid.uuid4().hex[:8]}"
    try:
        mine = b.ensure_place(tenant=k8s.tenant, project=k8s.project)
        theirs = b.ensure_place(tenant=other, project=k8s.project)  # the same project slug
        core = client.CoreV1Api(kube_admin)
        pvs = {
            pv.spec.claim_ref.namespace: pv
            for pv in core.list_persistent_volume(label_selector="torus.io/project=vision").items
            if pv.spec.claim_ref.namespace in (mine, theirs)
        }
        assert pvs[mine].spec.host_path.path == f"{k8s.job_root}/{k8s.tenant}/vision"
        assert pvs[theirs].spec.host_path.path == f"{k8s.job_root}/{other}/vision"
        netpol = client.NetworkingV1Api(kube_admin)
        for ns in (mine, theirs):
            policy = netpol.read_namespaced_network_policy("torus-default-deny", ns)
            assert policy.spec.policy_types == ["Ingress"]
            assert policy.spec.ingress[0]._from[0].namespace_selector is None  # same namespace only
        # a job of this tenant cannot name the other's tree
        with pytest.raises(names.InvalidValue) as caught:
            b.submit(k8s.sub(working_dir=f"{k8s.job_root}/{other}/vision/jobs/1"))
        assert caught.value.field == "working_dir"
        # the other tenant's volume is bound ahead to its own claim: a claim here cannot take it
        claim = places.persistent_volume_claim(
            settings=b.settings, tenant=k8s.tenant, project="vision", namespace=mine
        )
        claim["metadata"]["name"] = "steal"
        claim["spec"]["volumeName"] = pvs[theirs].metadata.name
        KubeClient(b.settings).create(claim)
        time.sleep(2)  # the binder's turn (nothing to wait for: it must not happen)
        stolen = core.read_namespaced_persistent_volume_claim("steal", mine)
        assert stolen.status.phase != "Bound"
        assert (
            core.read_persistent_volume(pvs[theirs].metadata.name).spec.claim_ref.namespace
            == theirs
        )
    finally:
        delete_tenant_objects(kube_admin, other)


def test_a_reconcile_pass_makes_one_request_whatever_the_jobs(k8s):
    k8s.node()
    b = k8s.setup(kwok_delays=LONG).backend
    b.ensure_place(tenant=k8s.tenant, project=k8s.project)

    def pass_requests() -> int:
        before = KubeClient.calls
        b.jobs()
        b.inventory()
        b.accounting(tags={"torus:none"}, since=None)
        return KubeClient.calls - before

    empty = pass_requests()
    subs = [k8s.sub(accelerators_per_node=1) for _ in range(6)]
    for s in subs:
        b.submit(s)
    for s in subs:
        wait_state(b, s.tag, {"Running"})
    assert pass_requests() == empty == 1  # the node list; jobs come from the watcher


def test_cancel_deletes_the_job_and_its_pods(k8s, kube_admin):
    k8s.node()
    b = k8s.setup(kwok_delays=LONG).backend
    sub = k8s.sub(nodes=2, accelerators_per_node=2)
    backend_id = b.submit(sub)
    wait_state(b, sub.tag, {"Running"})
    b.cancel(backend_id)
    b.cancel(backend_id)  # twice is fine
    gone = wait_state(b, sub.tag, {"Deleted"})
    assert b.attempt_outcome(gone) == "CANCELLED"
    wait_for(lambda: not pods_of(kube_admin, backend_id), what="the pods deleted")
    with pytest.raises(ApiError):
        KubeClient(b.settings).get(
            "Job", namespace=backend_id.split("/")[0], name=backend_id.split("/")[1]
        )


KWOK_FAIL = {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"}  # kwok: exit code 1


def test_an_exit_code_and_the_time_limit(k8s, kube_admin):
    k8s.node()
    b = k8s.setup(kwok_delays=LONG).backend
    failing = k8s.sub(labels=KWOK_FAIL)
    b.submit(failing)
    failed = wait_state(b, failing.tag, {"Failed"})
    assert (failed.exit_code, b.attempt_outcome(failed)) == (1, "FAILED")
    # the time limit is activeDeadlineSeconds (made short here: a Job allows changing it)
    slow = k8s.sub()
    backend_id = b.submit(slow)
    wait_state(b, slow.tag, {"Running"})
    ns, name = backend_id.split("/")
    client.BatchV1Api(kube_admin).patch_namespaced_job(
        name, ns, {"spec": {"activeDeadlineSeconds": 1}}
    )
    timed_out = wait_state(b, slow.tag, {"DeadlineExceeded"})
    assert b.attempt_outcome(timed_out) == "TIMEOUT"


def test_an_exit_code_the_cluster_lists_as_retryable(k8s):
    k8s.node()
    b = k8s.setup(kwok_delays=LONG, retryable_exit_codes=[1]).backend
    failing = k8s.sub(labels=KWOK_FAIL)
    b.submit(failing)
    found = wait_state(b, failing.tag, {"NodeLost", "Failed"})
    assert (found.state, found.exit_code, b.attempt_outcome(found)) == ("NodeLost", 1, "NODE_FAIL")


# Last in this module: it disturbs every client of the shared apiserver for a while.
def test_the_apiserver_restarted(k8s, kube_admin):
    k8s.node()
    b = k8s.setup(kwok_delays=LONG).backend
    w = k8s.watch

    def view() -> str:
        state = {k: v for k, v in w.counters.items() if ":" in k} | {"live": w.live}
        return f"watcher {state}\n" + cluster_view(kube_admin, tenant=k8s.tenant, pool=k8s.pool)

    first = k8s.sub()
    b.submit(first)  # (a restart just before, another run's, delays it as below)
    wait_state(b, first.tag, {"Running"}, timeout=RECOVERY, explain=view)
    resumes, job_lists = w.counters["resumes:Pod"], w.counters["lists:Job"]
    subprocess.run(
        [str(ROOT / "platform/services/components/kubernetes"), "restart-apiserver"],
        check=True,
        capture_output=True,
        timeout=180,
    )

    # The restarted apiserver's watch cache begins now: a version from before it is gone.
    # The watcher may have met that already on resuming; else it is made to.
    resume_from_a_gone_version(w, "Job")
    wait_for(lambda: w.counters["lists:Job"] > job_lists, what="a relist of Jobs", explain=view)
    w.wait_synced()
    assert record_of(b, first.tag).state == "Running"  # kept across the relist
    second = k8s.sub()
    wait_for(lambda: _submitted(b, second), what="a submit after the restart", timeout=120)
    # Kueue, the controller-manager, the scheduler and kwok reconnect on their own back-off
    found = wait_state(b, second.tag, {"Running"}, timeout=RECOVERY, explain=view)
    assert found.state == "Running"
    assert w.counters["resumes:Pod"] > resumes


def _submitted(backend, sub) -> bool:
    try:
        backend.submit(sub)
    except Exception:  # the apiserver still coming back
        return False
    return True
