"""Manifests are data: every value checked at the boundary, hostile text stays a value, the
pod security fields are always there. Pure functions: no cluster needed."""

import json
import uuid
from dataclasses import replace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.compute.backends.base import Submission, SubmitRejected
from apps.compute.backends.kubernetes import manifests, names, places
from apps.compute.backends.kubernetes.settings import KubeSettings

SETTINGS = KubeSettings(
    api_url="https://127.0.0.1:6443", job_root="/srv/torus/jobs", default_image="busybox:1.36"
)
HOSTILE = "x\n---\nkind: ClusterRoleBinding\nmetadata: {name: pwn}"


def submission(**overrides) -> Submission:
    base = dict(
        tag=f"torus:{uuid.uuid4()}",
        name="train",
        environment={"TORUS_ARGV": "python", "TORUS_LAUNCHER": "none"},
        nodes=1,
        tasks_per_node=1,
        cpus_per_task=2,
        memory_mb_per_node=4096,
        time_limit_minutes=30,
        accelerators_per_node=4,
        accelerator_resource="nvidia.com/gpu",
        partition="pool-a",
        working_dir="/srv/torus/jobs/acme/vision/jobs/1",
        user="alice",
        uid=20001,
        gid=30001,
        tenant="acme",
        project="vision",
        image="registry.example.com/team/train:1.0",
        labels={"team": "cv"},
    )
    base.update(overrides)
    return Submission(**base)


def job_of(sub: Submission, settings_: KubeSettings = SETTINGS) -> dict:
    return manifests.job(settings=settings_, submission=sub, pools=["pool-a", "pool-b"])[1]


def pod_spec(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def test_single_node_job_shape():
    sub = submission()
    job = job_of(sub)
    spec, pod = job["spec"], pod_spec(job)
    assert job["metadata"]["namespace"] == "torus-acme"
    assert job["metadata"]["name"] == f"t-{sub.tag[6:]}"
    assert job["metadata"]["annotations"]["torus.io/tag"] == sub.tag
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "torus"
    assert job["metadata"]["labels"]["team"] == "cv"
    assert spec["suspend"] is True and spec["backoffLimit"] == 0
    assert spec["parallelism"] == spec["completions"] == 1 and "completionMode" not in spec
    assert spec["activeDeadlineSeconds"] == 30 * 60
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {
        "cpu": "2",
        "memory": "4096Mi",
        "nvidia.com/gpu": "4",
    }
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert pod["nodeSelector"] == {"torus.io/pool": "pool-a"}
    assert container["command"][:2] == ["/bin/bash", "-c"]
    assert container["command"][2] == manifests.LAUNCHER  # the same text for every job
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TORUS_MASTER_ADDR"] == "127.0.0.1" and env["TORUS_NNODES"] == "1"
    mount = container["volumeMounts"][0]
    assert mount["mountPath"] == "/srv/torus/jobs/acme/vision"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "project-vision"


def test_multi_node_is_indexed_with_a_headless_service():
    sub = submission(nodes=2, exclude_nodes=("kwok-gpu-1",))
    job = job_of(sub)
    name = job["metadata"]["name"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    assert pod_spec(job)["subdomain"] == name
    env = {e["name"]: e["value"] for e in pod_spec(job)["containers"][0]["env"]}
    assert env["TORUS_MASTER_ADDR"] == f"{name}-0.{name}.torus-acme.svc"
    term = pod_spec(job)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["nodeSelectorTerms"][0]["matchFields"][0] == {
        "key": "metadata.name",
        "operator": "NotIn",
        "values": ["kwok-gpu-1"],
    }
    svc = manifests.service(job=job, owner_uid="0f6b3c1e-1111-2222-3333-444455556666")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"torus.io/attempt-id": sub.tag[6:]}
    assert svc["metadata"]["ownerReferences"][0]["name"] == name


@pytest.mark.parametrize(
    "overrides",
    [
        {"uid": 0},
        {"uid": 999},
        {"gid": 0},
        {"uid": 20001, "labels": {"securityContext": "privileged"}},
        {"environment": {"TORUS_X": "1", "privileged": "true"}},
    ],
)
def test_pod_security_is_always_set(overrides):
    sub = submission(**overrides)
    if sub.uid < 1000 or sub.gid < 1000:
        with pytest.raises(SubmitRejected, match="root is refused"):
            job_of(sub)
        return
    pod = pod_spec(job_of(sub))
    assert pod["securityContext"] == {
        "runAsUser": sub.uid,
        "runAsGroup": sub.gid,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    sc = pod["containers"][0]["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsUser"] == sub.uid and sc["runAsNonRoot"] is True
    assert all("hostPath" not in v for v in pod["volumes"])  # only the platform's PVC


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"tenant": "Acme"}, "tenant"),
        ({"tenant": "acme\n---"}, "tenant"),
        ({"project": "../other"}, "project"),
        ({"partition": "pool c"}, "partition"),
        ({"partition": "pool-z"}, "partition"),
        ({"image": "busybox; rm -rf /"}, "image"),
        ({"image": "", "tenant": "acme"}, None),  # the cluster's default image
        ({"working_dir": "/srv/torus/jobs/other/proj"}, "working_dir"),
        ({"working_dir": "/srv/torus/jobs/acme/vision/../../other"}, "working_dir"),
        ({"environment": {"BAD NAME": "1"}}, "environment"),
        ({"environment": {"X": "a\x00b"}}, "environment[X]"),
        ({"labels": {"team": HOSTILE}}, "labels[team]"),
        ({"labels": {HOSTILE: "x"}}, "labels key"),
        ({"exclude_nodes": ("node\nx",)}, "exclude_nodes"),
        ({"accelerator_resource": "nvidia.com/gpu\n"}, "accelerator resource"),
        ({"tag": "torus:../x"}, "tag"),
        ({"nodes": 0}, "resources"),
        ({"time_limit_minutes": 0}, "time_limit"),
    ],
)
def test_bad_values_are_refused_naming_the_field(overrides, field):
    sub = submission(**overrides)
    if field is None:
        assert pod_spec(job_of(sub))["containers"][0]["image"] == "busybox:1.36"
        return
    with pytest.raises(names.InvalidValue) as caught:
        job_of(sub)
    assert caught.value.field == field


def test_project_tree_is_bound_to_one_claim_in_the_tenants_namespace():
    pv = places.persistent_volume(
        settings=SETTINGS, tenant="acme", project="vision", namespace="torus-acme"
    )
    pvc = places.persistent_volume_claim(
        settings=SETTINGS, tenant="acme", project="vision", namespace="torus-acme"
    )
    assert pv["spec"]["hostPath"]["path"] == "/srv/torus/jobs/acme/vision"
    assert pv["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "torus-acme",
        "name": pvc["metadata"]["name"],
    }
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_namespace_per_project_and_long_names_stay_labels():
    per_project = replace(SETTINGS, namespace_per="project")
    long = "p" * 60
    ns = manifests.namespace_name(settings=per_project, tenant="acme", project=long)
    assert len(ns) <= 63 and names.DNS_LABEL.fullmatch(ns)
    other = manifests.namespace_name(settings=per_project, tenant="acme", project=long + "x")
    assert other != ns  # the hash keeps long names apart


def test_quota_objects():
    cq = places.cluster_queue(
        settings=SETTINGS, tenant="acme", pools=["pool-a"], resources=["nvidia.com/gpu"], gpus=8
    )
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]
    assert flavor["name"] == "pool-pool-a"
    assert {"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "0"} in flavor[
        "resources"
    ]
    assert places.gpu_limit_of(cq) == 8
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"torus.io/tenant": "acme"}}
    rq = places.resource_quota(namespace="torus-acme", resource="nvidia.com/gpu", gpus=8)
    assert rq["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    assert places.resource_quota(namespace="n", resource="nvidia.com/gpu", gpus=None)["spec"] == {
        "hard": {}
    }


def test_settings_refuse_bad_config():
    with pytest.raises(names.InvalidValue, match="api_url"):
        KubeSettings.from_config({})
    with pytest.raises(names.InvalidValue, match="namespace_per"):
        KubeSettings.from_config({"api_url": "https://x", "namespace_per": "user"})
    with pytest.raises(names.InvalidValue, match="kwok_delays"):
        KubeSettings.from_config({"api_url": "https://x", "kwok_delays": {"pod-ready": "1s\n"}})
    s = KubeSettings.from_config({"api_url": "https://x/", "kwok_delays": {"pod-complete": "3s"}})
    assert s.api_url == "https://x"
    job = job_of(submission(), replace(s, job_root="/srv/torus/jobs", default_image="busybox"))
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "pod-complete.stage.kwok.x-k8s.io/delay": "3s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "3s",
    }


def test_a_replica_runs_the_clusters_serving_image_listening_on_its_pods_ip():
    sub = submission(kind="serve", image="")
    with pytest.raises(SubmitRejected, match="serving_image"):
        job_of(sub)  # a cluster without a serving image runs no deployments
    serving = replace(SETTINGS, serving_image="example.org/llama-server:1", serving_engine="/app/s")
    container = pod_spec(job_of(sub, serving))["containers"][0]
    assert container["image"] == "example.org/llama-server:1"
    env = {e["name"]: e for e in container["env"]}
    assert env["TORUS_SERVE_ENGINE"]["value"] == "/app/s"
    assert env["TORUS_SERVE_PORT"]["value"] == "8080"
    assert env["TORUS_SERVE_HOST"] == {
        "name": "TORUS_SERVE_HOST",
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    }
    assert container["securityContext"]["runAsUser"] == 20001  # as any job: never root
    # an ordinary job on the same cluster keeps its own image and gets none of these
    other = pod_spec(job_of(submission(), serving))["containers"][0]
    assert other["image"] == "registry.example.com/team/train:1.0"
    assert not {e["name"] for e in other["env"]} & {"TORUS_SERVE_HOST", "TORUS_SERVE_ENGINE"}
    for config, field in (
        ({"serving_image": "bad image"}, "serving_image"),
        ({"serving_image": "ok:1", "serving_engine": "relative/path"}, "serving_engine"),
        ({"serving_image": "ok:1", "serving_engine": "/a", "serving_port": 80}, "serving_port"),
    ):
        with pytest.raises(names.InvalidValue, match=field):
            KubeSettings.from_config({"api_url": "https://x", **config})


# -- fuzz: hostile text never adds an object or a field --------------------------------------

ANY_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80
) | st.sampled_from([HOSTILE, '"}, {"kind": "ClusterRoleBinding', "a: b\nc: d", "{{x}}", "$(id)"])


def _shape(value, path=""):
    """Every path of keys in a manifest (list items as [])."""
    if isinstance(value, dict):
        out = set()
        for key, item in value.items():
            out.add(f"{path}/{key}")
            out |= _shape(item, f"{path}/{key}")
        return out
    if isinstance(value, list):
        out = set()
        for item in value:
            out |= _shape(item, f"{path}[]")
        return out
    return set()


BASE_SHAPE = _shape(job_of(submission()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=ANY_TEXT,
    env_value=ANY_TEXT,
    env_name=ANY_TEXT,
    label_value=ANY_TEXT,
    label_key=ANY_TEXT,
    partition=ANY_TEXT,
    image=ANY_TEXT,
    tenant=ANY_TEXT,
)
def test_hostile_values_cannot_add_objects_or_fields(
    name, env_value, env_name, label_value, label_key, partition, image, tenant
):
    label_key = label_key or "k"
    sub = submission(
        name=name,
        environment={"TORUS_X": env_value, env_name or "E": "1"},
        labels={label_key: label_value},
        partition=partition or None,
        image=image,
        tenant=tenant or "acme",
    )
    try:
        job = manifests.job(settings=SETTINGS, submission=sub, pools=None)[1]
    except names.InvalidValue as exc:
        assert exc.field  # refused, naming where
        return
    # Serialised as the client sends it, then read back as YAML (JSON is YAML): one object,
    # a Job, with exactly the fields a plain submission has (plus the one extra env/label).
    text = json.dumps(job)
    docs = list(yaml.safe_load_all(text))  # (PyYAML splits non-BMP escapes: compare JSON)
    assert len(docs) == 1 and docs[0]["kind"] == "Job"
    assert json.loads(text) == job
    assert _shape(job) <= BASE_SHAPE | {
        "/spec/template/spec/nodeSelector",
        "/spec/template/spec/nodeSelector/torus.io/pool",
    } | {
        f"/metadata/labels/{label_key}",
        f"/spec/template/metadata/labels/{label_key}",
    }
    env = {e["name"]: e["value"] for e in pod_spec(job)["containers"][0]["env"]}
    assert env["TORUS_X"] == env_value  # a value stays a value, byte for byte
    assert job["metadata"]["annotations"]["torus.io/name"] == name
    assert pod_spec(job)["securityContext"]["runAsUser"] == 20001
