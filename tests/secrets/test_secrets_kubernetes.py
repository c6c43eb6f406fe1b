"""Secrets on Kubernetes: a Secret per attempt in the tenant's namespace, owned by its Job and
read by the container through secretKeyRef; no value in the Job, a replica's engine key
likewise. The manifests as data, then on the real control plane with the platform's token
(which may create and delete Secrets, never read or list them)."""

import base64
import json
import uuid

import pytest
from kubernetes import client

from apps.compute.backends.kubernetes import manifests, names
from tests.kubernetes.conftest import kube_admin, kube_env, kube_platform  # noqa: F401
from tests.kubernetes.kube_helpers import wait_for
from tests.kubernetes.test_backend_cluster import k8s  # noqa: F401  (fixture)
from tests.kubernetes.test_control_plane import can
from tests.kubernetes.test_manifests import job_of, pod_spec, submission

VALUE = "hf_k8s_3b1f0d9c7e5a4b2c"
ENGINE_KEY = "engine-key-7c1d5e9f3a2b4c6d"


def container_env(job: dict) -> dict:
    return {entry["name"]: entry for entry in pod_spec(job)["containers"][0]["env"]}


def test_a_jobs_secrets_are_secret_key_refs_never_values():
    sub = submission(secrets={"HF_TOKEN": VALUE})
    job = job_of(sub)
    env = container_env(job)
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": job["metadata"]["name"], "key": "HF_TOKEN"}},
    }
    assert VALUE not in json.dumps(job)
    secret = manifests.job_secret(job=job, owner_uid=str(uuid.uuid4()), values=sub.secrets)
    assert secret["kind"] == "Secret" and secret["metadata"]["namespace"] == "torus-acme"
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == VALUE
    assert VALUE not in json.dumps(secret)  # only base64 in the object


def test_a_secret_named_as_a_plain_variable_or_badly_is_refused():
    with pytest.raises(names.InvalidValue, match="secrets"):
        job_of(
            submission(
                environment={"TORUS_ARGV": "x", "HF_TOKEN": "p"}, secrets={"HF_TOKEN": VALUE}
            )
        )
    with pytest.raises(names.InvalidValue, match="secrets"):
        job_of(submission(secrets={"BAD-NAME": VALUE}))
    # the allowed control: a plain variable and a secret of other names
    job = job_of(
        submission(environment={"TORUS_ARGV": "x", "PLAIN": "p"}, secrets={"HF_TOKEN": VALUE})
    )
    assert container_env(job)["PLAIN"]["value"] == "p"


@pytest.mark.parametrize(
    ("verb", "allowed"),
    [("create", True), ("delete", True), ("get", False), ("list", False), ("watch", False)],
)
def test_the_platform_writes_secrets_and_never_reads_them(kube_platform, verb, allowed):  # noqa: F811
    assert can(kube_platform, verb, "", "secrets", "torus-tenant-x", None) is allowed


def test_a_job_and_a_replica_read_their_secrets_from_a_secret_owned_by_the_job(
    k8s,  # noqa: F811
    kube_admin,  # noqa: F811
):
    k8s.node()
    b = k8s.setup(serving_image="example.org/llama-server:1", serving_engine="/app/server").backend
    core, batch = client.CoreV1Api(kube_admin), client.BatchV1Api(kube_admin)
    for sub, key, value in (
        (k8s.sub(secrets={"HF_TOKEN": VALUE}, accelerators_per_node=0), "HF_TOKEN", VALUE),
        (
            k8s.sub(kind="serve", secrets={"LLAMA_API_KEY": ENGINE_KEY}, accelerators_per_node=0),
            "LLAMA_API_KEY",
            ENGINE_KEY,
        ),
    ):
        ns, name = b.submit(sub).split("/")
        job = batch.read_namespaced_job(name, ns)
        as_json = json.dumps(kube_admin.sanitize_for_serialization(job))
        assert value not in as_json
        (container,) = job.spec.template.spec.containers
        ref = next(e for e in container.env if e.name == key).value_from.secret_key_ref
        assert (ref.name, ref.key) == (name, key)
        secret = core.read_namespaced_secret(name, ns)  # as the admin: the platform may not
        assert ns == f"torus-{k8s.tenant}"
        assert base64.b64decode(secret.data[key]).decode() == value
        (owner,) = secret.metadata.owner_references
        assert (owner.kind, owner.name, owner.uid) == ("Job", name, job.metadata.uid)
        assert b.submit(sub) == f"{ns}/{name}"  # a retried submit replaces its Secret
        b.cancel(f"{ns}/{name}")  # deleting the Job deletes its Secret (the garbage collector)

        def gone(ns=ns, name=name):
            try:
                core.read_namespaced_secret(name, ns)
            except client.ApiException as exc:
                return exc.status == 404
            return False

        wait_for(gone, what="the Secret to go with its Job", timeout=60)
