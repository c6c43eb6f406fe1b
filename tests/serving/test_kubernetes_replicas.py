"""A deployment on the real Kubernetes control plane: its replicas as Jobs of the cluster's
serving image, running as the deploying user, reached at their pods' IPs through the gateway,
replaced when their engine dies, deleted with the deployment. kwok runs no process: the
engine is started as the pod's container by tests/serving/kubelet.py."""

import time

import httpx
import pytest
from django.conf import settings
from django.urls import reverse
from kubernetes import client

from apps.compute.backends.kubernetes.settings import KubeSettings
from apps.compute.services import cluster_sync
from apps.tenancy.models import Role
from tests.jobs.test_kubernetes_jobs import SLOW, kube_jobs, pool, watching  # noqa: F401
from tests.kubernetes.conftest import kube_admin, kube_env  # noqa: F401 (fixtures)
from tests.kubernetes.kube_helpers import delete_tenant_objects, forget_pools, make_cluster
from tests.serving.conftest import deploy, wait_for, wait_ready
from tests.serving.kubelet import Kubelet
from tests.serving.test_gateway import COMPLETION, call

pytestmark = pytest.mark.django_db(transaction=True)
SERVING_IMAGE = "registry.invalid/torus/llama-server:latest"


@pytest.fixture
def serving_cluster(acme, pool, kube_env, kube_admin):  # noqa: F811
    cluster = make_cluster(
        kube_env,
        job_root=settings.TORUS_JOB_ROOT,
        name="k8s-serve",
        kwok_delays=SLOW,  # a replica's pod stays Running (kwok ends a Job's pods otherwise)
        serving_image=SERVING_IMAGE,
        serving_engine=settings.TORUS_LLAMA_SERVER,
    )
    forget_pools(cluster)
    assert cluster_sync(cluster=cluster), cluster.last_error
    try:
        with watching(cluster):
            yield cluster
    finally:
        delete_tenant_objects(kube_admin, acme.tenant.slug)


def test_a_deployment_on_kubernetes_serves_heals_and_goes(
    acme,
    gguf_version,
    pool,  # noqa: F811
    serving_cluster,
    serving_loop,
    asgi_server,
    kube_admin,  # noqa: F811
    tmp_path,
):
    member = acme.client(Role.MEMBER)
    made = deploy(
        member, acme.project, cluster="k8s-serve", partition=pool[0], slots=2, context=512
    )
    selector = f"torus.io/tenant={acme.tenant.slug}"
    with Kubelet(kube_admin, label_selector=selector, log_dir=tmp_path) as kubelet:
        deployment = wait_ready(made["id"], replicas=1, timeout=300)
        replica = deployment.replicas.get(state="READY")
        attempt = replica.job.attempts.get()
        (kube_job,) = kube_jobs(kube_admin, attempt)
        assert kube_job.metadata.namespace == f"torus-{acme.tenant.slug}"
        pod = (
            client.CoreV1Api(kube_admin)
            .list_pod_for_all_namespaces(label_selector=f"torus.io/attempt-id={attempt.pk}")
            .items[0]
        )
        # reached at its pod's IP (from the apiserver) on the cluster's serving port
        assert (replica.host, replica.port) == (pod.status.pod_ip, KubeSettings.serving_port)
        container = kube_job.spec.template.spec.containers[0]
        assert container.image == SERVING_IMAGE
        assert container.security_context.run_as_user >= 1000  # the member, never root
        assert container.security_context.allow_privilege_escalation is False

        token = acme.tokens[Role.MEMBER]
        with httpx.Client(base_url=asgi_server.url, timeout=60) as gateway:
            answer = call(gateway, deployment, token, json=COMPLETION)
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-torus-replica"] == str(replica.pk)
            assert answer.json()["usage"]["completion_tokens"] == 8

            # its engine dies (the pod is still Running to kwok): the replica stops
            # answering, is replaced by a new Job, and the deployment serves again
            kubelet.kill_engine()
            healed = wait_for(
                made["id"],
                condition=lambda d: (
                    d.replicas.filter(state="READY").exclude(pk=replica.pk).exists()
                ),
                timeout=300,
                what="a new replica READY",
            )
            new = healed.replicas.get(state="READY")
            assert new.job_id != replica.job_id  # a new Job (its pod may reuse the address)
            answer = call(gateway, deployment, token, json=COMPLETION)
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-torus-replica"] == str(new.pk)

        attempts = [attempt, new.job.attempts.get()]
        response = member.post(
            reverse("deployment-archive", args=[made["id"]]),
            {"confirm": made["name"]},
            format="json",
        )
        assert response.status_code == 200, response.content
        deadline = time.monotonic() + 120
        while any(kube_jobs(kube_admin, a) for a in attempts):
            assert time.monotonic() < deadline, "a replica's Job outlived its deployment"
            time.sleep(0.5)
