"""A Kubernetes cluster's settings (Cluster.config), read and checked once per backend."""

from dataclasses import dataclass, field

from apps.compute.backends.kubernetes import names

KWOK_STAGES = ("pod-create", "pod-ready", "pod-complete", "pod-delete")


@dataclass(frozen=True)
class KubeSettings:
    api_url: str
    ca_file: str = ""
    token_file: str = ""
    namespace_per: str = "tenant"  # or "project"
    storage_class: str = "torus-project"
    kueue: bool = True
    visibility_url: str = ""
    default_image: str = ""
    job_root: str = ""
    pool_label: str = "torus.io/pool"
    pool_taint: bool = False  # pools' nodes carry a NoSchedule taint <pool_label>=<pool>
    cohort: str = "torus"
    queue_cpu: str = "100000"  # a tenant ClusterQueue's cpu and memory (the GPU is the quota)
    queue_memory: str = "100000Gi"
    unlimited_gpus: int = 100000  # the nominal quota of a tenant without a GPU limit
    retryable_exit_codes: tuple[int, ...] = ()
    ttl_seconds_after_finished: int = 3600
    kwok_delays: dict[str, str] = field(default_factory=dict)  # stage -> "3s" (tests only)
    timeout: float = 20.0
    # Model deployments' replicas: the image that carries the engine, the engine's path in
    # it, and the port it listens on at its pod's IP (none: deployments are refused here).
    serving_image: str = ""
    serving_engine: str = ""
    serving_port: int = 8080
    # Tenants' egress (places.egress_policy): these networks are allowed (the internet by
    # default), less the denied ones, which always include the apiserver and the metadata
    # address; DNS goes to the cluster's DNS pods.
    egress_allow_cidrs: tuple[str, ...] = ("0.0.0.0/0", "::/0")
    egress_deny_cidrs: tuple[str, ...] = ()  # the platform's services, the nodes' network
    dns_namespace: str = "kube-system"
    dns_pod_labels: dict[str, str] = field(default_factory=lambda: {"k8s-app": "kube-dns"})

    @classmethod
    def from_config(cls, config: dict, *, job_root: str = "") -> "KubeSettings":
        config = config or {}
        if not config.get("api_url"):
            raise names.InvalidValue("config.api_url", "a Kubernetes cluster needs its API URL")
        per = config.get("namespace_per", "tenant")
        if per not in ("tenant", "project"):
            raise names.InvalidValue("config.namespace_per", "must be 'tenant' or 'project'")
        delays = dict(config.get("kwok_delays") or {})
        for stage, value in delays.items():
            if stage not in KWOK_STAGES or not isinstance(value, str) or not value[:-1].isdigit():
                raise names.InvalidValue("config.kwok_delays", f"{stage!r}: {value!r}")
        image = config.get("default_image") or ""
        if image:
            names.image(image, field="config.default_image")
        serving_image = config.get("serving_image") or ""
        serving_engine = config.get("serving_engine") or ""
        if serving_image:
            names.image(serving_image, field="config.serving_image")
            names.absolute_path(serving_engine, field="config.serving_engine")
        serving_port = config.get("serving_port", 8080)
        if not isinstance(serving_port, int) or not 1024 <= serving_port <= 65535:
            raise names.InvalidValue("config.serving_port", "a port number from 1024 to 65535")
        allow = config.get("egress_allow_cidrs", ["0.0.0.0/0", "::/0"])
        dns_labels = config.get("dns_pod_labels", {"k8s-app": "kube-dns"})
        if not isinstance(dns_labels, dict) or not dns_labels:
            raise names.InvalidValue("config.dns_pod_labels", "labels of the DNS pods (a map)")
        return cls(
            api_url=str(config["api_url"]).rstrip("/"),
            ca_file=str(config.get("ca_file") or ""),
            token_file=str(config.get("token_file") or ""),
            namespace_per=per,
            storage_class=names.dns_subdomain(
                config.get("storage_class") or "torus-project", field="config.storage_class"
            ),
            kueue=bool(config.get("kueue", True)),
            visibility_url=str(config.get("visibility_url") or ""),
            default_image=image,
            job_root=str(config.get("job_root") or job_root),
            pool_label=names.qualified_name(
                config.get("pool_label") or "torus.io/pool", field="config.pool_label"
            ),
            pool_taint=bool(config.get("pool_taint", False)),
            cohort=names.dns_label(config.get("cohort") or "torus", field="config.cohort"),
            queue_cpu=str(config.get("queue_cpu") or "100000"),
            queue_memory=str(config.get("queue_memory") or "100000Gi"),
            retryable_exit_codes=tuple(int(c) for c in config.get("retryable_exit_codes") or ()),
            ttl_seconds_after_finished=int(config.get("ttl_seconds_after_finished", 3600)),
            kwok_delays=delays,
            timeout=float(config.get("timeout", 20)),
            serving_image=serving_image,
            serving_engine=serving_engine,
            serving_port=serving_port,
            egress_allow_cidrs=names.cidrs(allow, field="config.egress_allow_cidrs"),
            egress_deny_cidrs=names.cidrs(
                config.get("egress_deny_cidrs") or [], field="config.egress_deny_cidrs"
            ),
            dns_namespace=names.dns_label(
                config.get("dns_namespace") or "kube-system", field="config.dns_namespace"
            ),
            dns_pod_labels=names.labels(dns_labels, field="config.dns_pod_labels"),
        )
