"""Tenants' egress (issue 33 item 6): every tenant namespace holds an egress NetworkPolicy
beside its ingress one. Allowed: DNS to the cluster's DNS pods, the namespace's own pods and
the allowed networks (the internet by default); excepted from those: the platform's networks
(cluster config), the apiserver (its Service address and endpoints, read from the API) and
the cloud metadata address.

kwok runs no CNI and moves no packet, so nothing here is enforced: these tests check the
objects the real apiserver holds (schema, rules, exact networks), and that no peer of a
tenant's policy selects another tenant's namespace. What enforces them on a real cluster is
the CNI (docs/security.md, Kubernetes egress)."""

import ipaddress
import uuid

import pytest
from django.core.cache import cache
from kubernetes import client

from apps.compute.backends.kubernetes import manifests, names, places
from apps.compute.backends.kubernetes.backend import KubernetesBackend
from apps.compute.backends.kubernetes.client import KubeClient
from apps.compute.backends.kubernetes.settings import KubeSettings
from tests.kubernetes.kube_helpers import delete_tenant_objects, make_cluster, served

PLATFORM = ["127.0.0.0/8", "::1/128", "192.0.2.2/32", "10.20.0.0/16"]
DNS_RULE = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}
OWN_PODS_RULE = {"to": [{"podSelector": {}}]}


def settings_of(**config) -> KubeSettings:
    return KubeSettings.from_config({"api_url": "https://127.0.0.1:6443", **config})


def blocks_of(policy: dict) -> dict[str, list[str]]:
    """cidr -> its excepts, over every ipBlock peer of the policy."""
    return {
        peer["ipBlock"]["cidr"]: peer["ipBlock"].get("except", [])
        for rule in policy["spec"]["egress"]
        for peer in rule.get("to", [])
        if "ipBlock" in peer
    }


# -- the object (pure) ------------------------------------------------------------------------


def test_the_policy_allows_dns_own_pods_and_the_internet_less_the_denied_networks():
    s = settings_of(egress_deny_cidrs=PLATFORM)
    policy = places.egress_policy(
        settings=s, namespace="torus-acme", apiserver=["10.96.0.1/32", "192.0.2.2/32"]
    )
    assert policy["metadata"]["name"] == "torus-egress"
    assert policy["spec"]["podSelector"] == {} and policy["spec"]["policyTypes"] == ["Egress"]
    dns, own, internet = policy["spec"]["egress"]
    assert dns == DNS_RULE and own == OWN_PODS_RULE
    assert "ports" not in internet  # the internet on any port
    assert blocks_of(policy) == {
        # each denied network once, in address order
        "0.0.0.0/0": [
            "10.20.0.0/16", "10.96.0.1/32", "127.0.0.0/8", "169.254.169.254/32", "192.0.2.2/32"
        ],
        "::/0": ["::1/128", "fd00:ec2::254/128"],
    }  # fmt: skip
    # the control: without the platform's networks, only the apiserver and the metadata
    bare = places.egress_policy(settings=settings_of(), namespace="n", apiserver=["10.96.0.1"])
    assert blocks_of(bare) == {
        "0.0.0.0/0": ["10.96.0.1/32", "169.254.169.254/32"],
        "::/0": ["fd00:ec2::254/128"],
    }


def test_an_allowlist_keeps_only_its_networks_and_never_a_denied_one():
    s = settings_of(
        egress_allow_cidrs=["10.0.0.0/8", "169.254.0.0/16", "198.51.100.0/24"],
        egress_deny_cidrs=["198.51.100.0/23"],  # holds the third allowed network whole
    )
    policy = places.egress_policy(settings=s, namespace="n", apiserver=["10.96.0.1/32"])
    assert blocks_of(policy) == {
        "10.0.0.0/8": ["10.96.0.1/32"],
        "169.254.0.0/16": ["169.254.169.254/32"],
    }
    # no allowed network at all: DNS and the namespace's own pods, nothing else
    closed = places.egress_policy(
        settings=settings_of(egress_allow_cidrs=[]), namespace="n", apiserver=["10.96.0.1/32"]
    )
    assert closed["spec"]["egress"] == [DNS_RULE, OWN_PODS_RULE]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"egress_deny_cidrs": ["10.0.0.1/24"]}, "config.egress_deny_cidrs[0]"),  # host bits
        ({"egress_deny_cidrs": ["10.0.0.0/8", "nonsense"]}, "config.egress_deny_cidrs[1]"),
        ({"egress_deny_cidrs": "10.0.0.0/8"}, "config.egress_deny_cidrs"),  # not a list
        ({"egress_allow_cidrs": ["0.0.0.0/33"]}, "config.egress_allow_cidrs[0]"),
        ({"dns_namespace": "Kube_System"}, "config.dns_namespace"),
        ({"dns_pod_labels": {"bad key!": "x"}}, "config.dns_pod_labels key"),
        ({"dns_pod_labels": {}}, "config.dns_pod_labels"),
    ],
)
def test_bad_egress_config_is_refused_naming_the_field(config, field):
    with pytest.raises(names.InvalidValue) as caught:
        settings_of(**config)
    assert caught.value.field == field
    # the control: the same keys with good values are taken
    good = settings_of(
        egress_deny_cidrs=["10.0.0.0/24", "192.0.2.2"],
        egress_allow_cidrs=["0.0.0.0/0"],
        dns_namespace="dns",
        dns_pod_labels={"app.kubernetes.io/name": "coredns"},
    )
    assert good.egress_deny_cidrs == ("10.0.0.0/24", "192.0.2.2/32")


# -- on the control plane ----------------------------------------------------------------------


@pytest.fixture
def place(db, kube_env, kube_admin, tmp_path):
    """A Cluster row (platform networks as cluster config), two tenants of the test's own;
    their objects deleted after."""
    cluster = make_cluster(
        kube_env, job_root=str(tmp_path / "jobs"), kueue=False, egress_deny_cidrs=PLATFORM
    )
    tenants = [f"ke{uuid.uuid4().hex[:8]}" for _ in range(2)]
    yield cluster, tenants
    cache.delete(f"torus:k8s:{cluster.pk}:apiserver")
    for tenant in tenants:
        delete_tenant_objects(kube_admin, tenant)


def apiserver_networks(kube_admin) -> list[str]:
    """What the admin reads of the `kubernetes` Service: its cluster IPs and endpoints."""
    service = client.CoreV1Api(kube_admin).read_namespaced_service("kubernetes", "default")
    addresses = set(service.spec.cluster_ips or [service.spec.cluster_ip])
    slices = client.DiscoveryV1Api(kube_admin).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes"
    )
    for sliced in slices.items:  # none here: this apiserver advertises 127.0.0.1
        for endpoint in sliced.endpoints or []:
            addresses.update(endpoint.addresses)
    return [str(ipaddress.ip_network(a)) for a in addresses]


def policy_of(kube_admin, namespace: str, name: str) -> dict:
    found = client.NetworkingV1Api(kube_admin).read_namespaced_network_policy(name, namespace)
    return kube_admin.sanitize_for_serialization(found)


def selects(selector: dict | None, labels: dict) -> bool:
    """A label selector (matchLabels; matchExpressions In, NotIn, Exists, DoesNotExist)
    against labels."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, op = expression["key"], expression["operator"]
        value, present = labels.get(key), key in labels
        if op == "In":
            held = present and value in expression["values"]
        elif op == "NotIn":
            held = not present or value not in expression["values"]
        else:
            held = present == (op == "Exists")
        if not held:
            return False
    return True


def test_every_tenant_namespace_gets_the_egress_policy(place, kube_admin):
    cluster, (mine, theirs) = place
    backend = KubernetesBackend(cluster)
    namespaces = {t: backend.ensure_place(tenant=t, project="vision") for t in (mine, theirs)}
    apiserver = apiserver_networks(kube_admin)
    assert apiserver  # the Service's cluster IP at least
    assert sorted(backend.apiserver_addresses()) == sorted(apiserver)  # read by the platform
    denied = {*PLATFORM, *apiserver, *places.METADATA_CIDRS}
    core = client.CoreV1Api(kube_admin)
    for tenant, ns in namespaces.items():
        policy = policy_of(kube_admin, ns, "torus-egress")
        assert policy["spec"]["podSelector"] == {}
        assert policy["spec"]["policyTypes"] == ["Egress"]
        dns, own, _ = policy["spec"]["egress"]
        assert dns == DNS_RULE and own == OWN_PODS_RULE
        blocks = blocks_of(policy)
        assert set(blocks) == {"0.0.0.0/0", "::/0"}
        excepted = {e for excepts in blocks.values() for e in excepts}
        assert excepted == denied  # exactly: the platform, the apiserver, the metadata
        assert "169.254.169.254/32" in blocks["0.0.0.0/0"]
        for address in apiserver:
            assert address in blocks["0.0.0.0/0" if ":" not in address else "::/0"]
        # the ingress policy is still there beside it
        assert policy_of(kube_admin, ns, "torus-default-deny")["spec"]["policyTypes"] == ["Ingress"]
        # no peer reaches the other tenant's namespace: every namespaceSelector is the DNS
        # one and matches the other's labels not; peers without one are this namespace only
        other = namespaces[theirs if tenant == mine else mine]
        other_labels = core.read_namespace(other).metadata.labels
        peers = [p for rule in policy["spec"]["egress"] for p in rule["to"]]
        assert [p for p in peers if selects(p.get("namespaceSelector"), other_labels)] == []
        kube_system = core.read_namespace("kube-system").metadata.labels
        assert [p for p in peers if selects(p.get("namespaceSelector"), kube_system)] == [
            DNS_RULE["to"][0]
        ]  # the control: the matcher does match the DNS namespace


def test_an_existing_namespace_gets_it_on_the_next_pass_and_a_pass_changes_nothing(
    place, kube_admin
):
    cluster, (tenant, _) = place
    backend = KubernetesBackend(cluster)
    ns = manifests.namespace_name(settings=backend.settings, tenant=tenant, project="vision")
    kube = KubeClient(backend.settings)
    # a namespace provisioned before egress policies: its namespace and ingress policy only
    kube.apply(places.namespace(name=ns, tenant=tenant, project=None))
    kube.apply(places.network_policy(namespace=ns))
    netpol = client.NetworkingV1Api(kube_admin)
    names_before = {p.metadata.name for p in netpol.list_namespaced_network_policy(ns).items}
    assert names_before == {"torus-default-deny"}
    assert backend.ensure_place(tenant=tenant, project="vision") == ns
    made = netpol.read_namespaced_network_policy("torus-egress", ns)
    # another provisioning pass (another worker, the cache forgotten) applies the same object:
    # nothing changes, not even its resourceVersion
    cache.clear()
    KubernetesBackend(cluster).ensure_place(tenant=tenant, project="vision")
    again = netpol.read_namespaced_network_policy("torus-egress", ns)
    assert again.metadata.resource_version == made.metadata.resource_version
    assert {p.metadata.name for p in netpol.list_namespaced_network_policy(ns).items} == {
        "torus-default-deny",
        "torus-egress",
    }


def test_an_allowlist_policy_is_accepted_by_the_apiserver(db, kube_env, kube_admin, tmp_path):
    cluster = make_cluster(kube_env, job_root=str(tmp_path), kueue=False, egress_allow_cidrs=[])
    tenant = f"ke{uuid.uuid4().hex[:8]}"
    try:
        ns = KubernetesBackend(cluster).ensure_place(tenant=tenant, project="vision")
        policy = policy_of(kube_admin, ns, "torus-egress")
        assert policy["spec"]["egress"] == [DNS_RULE, OWN_PODS_RULE]
    finally:
        cache.delete(f"torus:k8s:{cluster.pk}:apiserver")
        delete_tenant_objects(kube_admin, tenant)


def access(api, *, verb: str, namespace: str, name: str | None) -> bool:
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb,
                group="discovery.k8s.io",
                resource="endpointslices",
                namespace=namespace,
                name=name,
            )
        )
    )
    return served(
        client.AuthorizationV1Api(api).create_self_subject_access_review, review
    ).status.allowed


def test_the_platform_reads_the_apiservers_endpoints_and_no_others(kube_platform):
    assert access(kube_platform, verb="get", namespace="default", name="kubernetes")
    assert not access(kube_platform, verb="get", namespace="default", name="other")
    assert not access(kube_platform, verb="list", namespace="default", name=None)
    assert not access(kube_platform, verb="get", namespace="kube-system", name="kubernetes")
    assert not access(kube_platform, verb="update", namespace="default", name="kubernetes")
