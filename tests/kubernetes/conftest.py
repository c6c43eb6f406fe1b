"""The local Kubernetes control plane (platform/services/components/kubernetes) as fixtures.

Its settings come from secrets/services.env (TORUS_K8S_*), as the portal reads them. Nothing
is skipped: a control plane that is down or misconfigured fails the test that needs it.
"""

import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import urllib3
from kubernetes import client, config

from config.env import env_str

TEST_LABEL = "torus.io/test"


@dataclass(frozen=True)
class KubeEnv:
    api_url: str
    ca_file: str
    token_file: str  # the platform's token (RBAC: platform/kubernetes/platform-rbac.yaml)
    admin_kubeconfig: str  # system:masters
    etcd_url: str
    visibility_url: str  # Kueue's visibility server, "" when it does not run

    @property
    def platform_token(self) -> str:
        return Path(self.token_file).read_text().strip()


@pytest.fixture(scope="session")
def kube_env() -> KubeEnv:
    return KubeEnv(
        api_url=env_str("TORUS_K8S_API_URL"),
        ca_file=env_str("TORUS_K8S_CA_FILE"),
        token_file=env_str("TORUS_K8S_TOKEN_FILE"),
        admin_kubeconfig=env_str("TORUS_K8S_ADMIN_KUBECONFIG"),
        etcd_url=env_str("TORUS_K8S_ETCD_URL"),
        visibility_url=env_str("TORUS_K8S_VISIBILITY_URL", ""),
    )


def etcd_compact(env: KubeEnv) -> int:
    """Compact etcd up to its current revision (through its HTTP gateway), so that a watch or
    list from an older resourceVersion gets 410 Gone; returns that revision."""
    head = httpx.post(f"{env.etcd_url}/v3/kv/range", json={"key": "AA=="}, timeout=10)
    revision = int(head.json()["header"]["revision"])
    done = httpx.post(
        f"{env.etcd_url}/v3/kv/compaction",
        json={"revision": revision, "physical": True},
        timeout=30,
    )
    # another client (the apiserver compacts every 5 minutes) may have compacted as far
    if done.status_code != 200 and "has been compacted" not in done.text:
        done.raise_for_status()
    return revision


# A refused connection (the apiserver restarting: tests of other sessions and this one
# restart it) is tried again for about 10 s; nothing else is retried.
RECONNECT = urllib3.Retry(
    total=None, connect=5, read=0, redirect=0, status=0, other=0, backoff_factor=0.3
)


def platform_client(env: KubeEnv) -> client.ApiClient:
    """An ApiClient as the platform makes one: API URL, CA file and bearer token file."""
    conf = client.Configuration(host=env.api_url)
    conf.ssl_ca_cert = env.ca_file
    conf.api_key = {"authorization": env.platform_token}
    conf.api_key_prefix = {"authorization": "Bearer"}
    conf.retries = RECONNECT
    return client.ApiClient(conf)


@pytest.fixture(scope="session")
def kube_admin(kube_env) -> client.ApiClient:
    """The official client with the admin credentials (system:masters); fails when the
    apiserver does not answer."""
    conf = client.Configuration()
    config.load_kube_config(config_file=kube_env.admin_kubeconfig, client_configuration=conf)
    conf.retries = RECONNECT
    api = client.ApiClient(conf)
    client.VersionApi(api).get_code()
    yield api
    api.close()


@pytest.fixture(scope="session")
def kube_platform(kube_env, kube_admin) -> client.ApiClient:
    """The official client with the platform's token (the ClusterRole torus-platform)."""
    api = platform_client(kube_env)
    yield api
    api.close()


@pytest.fixture
def kube_namespace(kube_admin) -> str:
    """A fresh namespace (labelled torus.io/test), deleted after the test."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    core = client.CoreV1Api(kube_admin)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={TEST_LABEL: "true"}))
    )
    yield name
    core.delete_namespace(name, propagation_policy="Background")
