"""The interface every backend implements, and the plain data it exchanges with the platform."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


class ClusterUnavailable(Exception):
    """The controller did not answer: not a job failure; try again later."""


class SubmitRejected(Exception):
    """The backend refused the request for good (bad partition, impossible resources...)."""


class AssociationMissing(ClusterUnavailable):
    """The cluster no longer has the submitter's association the platform made (its
    accounting was reset or restored, an operator removed the account): nothing was started;
    made again, the attempt is tried again."""


@dataclass(frozen=True)
class Submission:
    """Everything a backend needs to run one attempt. User values are data, never script."""

    tag: str  # "torus:<attempt id>", carried by the backend job and used to adopt orphans
    name: str
    environment: dict[str, str]
    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    memory_mb_per_node: int
    time_limit_minutes: int
    accelerator: str = "gpu"  # GRES name
    accelerators_per_node: int = 0
    accelerator_type: str | None = None
    partition: str | None = None
    exclude_nodes: tuple[str, ...] = ()
    working_dir: str = "/"
    stdout_path: str = ""
    stderr_path: str = ""
    # Who it runs as: the submitter's POSIX user and the project's group, and the cluster
    # account it is charged to. Never root: the backend refuses an empty user.
    user: str = ""
    uid: int = 0
    gid: int = 0
    account: str = ""
    # Where it runs, for backends that place jobs by owner (Kubernetes: a namespace per tenant
    # or project, a Kueue LocalQueue, volumes of the project's storage): slugs, validated.
    tenant: str = ""
    project: str = ""
    # A container image (only on clusters with supports_containers; the registry is checked
    # against the tenant's allowlist before this is built) and the accelerator's extended
    # resource name (AcceleratorType.resource_name, e.g. "nvidia.com/gpu").
    image: str = ""
    accelerator_resource: str = ""
    # Labels a backend may put on its objects (keys and values already validated).
    labels: dict[str, str] = field(default_factory=dict)
    # Lowers the job's priority in the cluster's own queue (Slurm's nice; 0 leaves it): the
    # platform's size order (apps/jobs/priority.py cluster_nice). Never negative.
    nice: int = 0
    # The job's kind (apps/jobs/models.Kind): a model deployment's replica ("serve") runs the
    # cluster's serving engine where the cluster says how (Kubernetes: config.serving_image).
    kind: str = "train"
    # Values the job must have but nobody may read back (project secrets by name, a replica's
    # engine key): never in `environment`, the database or a process's argv. Slurm passes them
    # in the job's own environment (slurmrestd's body, sbatch's --export-file); Kubernetes as
    # a Secret in the tenant's namespace read through secretKeyRef.
    secrets: dict[str, str] = field(default_factory=dict)


@dataclass
class BackendJob:
    """A job as the backend reports it, in the backend's own state words."""

    backend_id: str
    tag: str
    state: str
    reason: str = ""
    nodes: list[str] = field(default_factory=list)
    exit_code: int | None = None
    signal: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    restarts: int = 0  # times the backend itself requeued the job
    # Among several backend jobs with one tag, the highest `order` is the current one
    # (Slurm: the numeric job id; Kubernetes: the creation time). Backend ids are opaque
    # strings everywhere else.
    order: int = 0
    # Where it waits, when pending: e.g. the position in its queue (Kueue's visibility API).
    queue_position: int | None = None
    # How far behind its submission rank it waits (Slurm's nice, Submission.nice; 0 elsewhere).
    nice: int = 0


@dataclass(frozen=True)
class JobUsage:
    """What a running job uses, summed over its steps, tasks and nodes, read now."""

    cpu_seconds: float  # CPU time used so far
    memory_bytes: int  # resident memory now
    gpu_util: float | None = None  # mean GPU utilisation (%), where the nodes report it (NVML)


@dataclass
class NodeInfo:
    name: str
    address: str
    partitions: list[str]
    cpus: int
    memory_mb: int
    accelerators: dict[str, dict[str, int]]
    accelerators_in_use: dict[str, dict[str, int]]
    state: str
    reason: str
    # Translated by the backend: False when the node cannot run work (down, drained, not
    # ready, gone); the reconciler restarts attempts that ran on such nodes elsewhere.
    healthy: bool = True


@dataclass
class PartitionInfo:
    name: str
    is_default: bool
    state: str
    max_time_minutes: int | None
    node_names: list[str]


@dataclass(frozen=True)
class LogRef:
    """One output stream of one attempt, as a log source finds it."""

    tag: str  # the attempt's tag, as in Submission.tag ("torus:<attempt id>")
    backend_id: str  # "" before the attempt reached the cluster
    stream: str  # "stdout" or "stderr"
    path: str  # the file the Submission named for this stream (Submission.stdout_path...)


class LogSource(Protocol):
    """Where an attempt's output is read from, by byte offsets the platform keeps (the
    shipper, the log API, live tail and failure signatures all read through this)."""

    def read(self, *, ref: LogRef, offset: int, limit: int) -> bytes | None:
        """Up to `limit` bytes of the stream from byte `offset` (b"" at its end so far);
        None when the stream does not exist (not started yet, or gone for good). Raise
        ClusterUnavailable when the cluster does not answer (the caller retries later)."""

    def size(self, *, ref: LogRef) -> int | None:
        """The stream's length in bytes so far; None when it does not exist."""


class FileLogSource:
    """Output in files on storage shared with the compute nodes (Slurm's --output/--error),
    read from the job root through the one reader of tenants' trees (apps/identity/tree.py):
    a log file, or a directory above it, that a job replaced by a link is never followed.
    `read` raises TreeRefused for it (the shipper reports it once and ships nothing of it);
    `size` reads it as no stream (the log API shows nothing)."""

    def read(self, *, ref: LogRef, offset: int, limit: int) -> bytes | None:
        from django.conf import settings

        from apps.identity import tree

        if not ref.path:
            return None
        try:
            return tree.read_range(settings.TORUS_JOB_ROOT, ref.path, offset=offset, limit=limit)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def size(self, *, ref: LogRef) -> int | None:
        from django.conf import settings

        from apps.identity import tree

        if not ref.path:
            return None
        try:
            return tree.file_size(settings.TORUS_JOB_ROOT, ref.path)
        except (FileNotFoundError, NotADirectoryError, tree.TreeRefused):
            return None


class Backend(Protocol):
    # The backend's name in messages: "waiting in Slurm: Resources", "waiting in Kubernetes".
    display_name: str
    # True where the cluster may put a started job back in its queue by itself (Slurm's
    # requeue): the reconciler then takes it back and restarts the attempt itself. Elsewhere
    # a started attempt read as waiting stays RUNNING (the backend's own retry, or a stale
    # read) until the backend reports an end. Absent: False.
    requeues_jobs: bool

    # -- capabilities: class-level answers the platform asks without reaching the cluster
    # (backend_class(cluster).<name>); no module outside compute/backends/ names a backend.

    # Every job runs in a container: a job without an image needs the cluster's default_image.
    requires_image: bool
    # Jobs reach a directory on each node where the dataset stager keeps versions (a
    # cluster's config "dataset_node_cache" overrides it); elsewhere versions are read in place.
    dataset_node_cache: bool
    # Environment variable prefixes the backend's own commands read as options or set in a
    # job: refused in a spec's env and as secret names (with the platform's TORUS_).
    reserved_env_prefixes: tuple[str, ...]
    # Label prefixes (by their ending) the backend's own objects carry: refused in a spec's
    # labels (with the platform's torus.io).
    reserved_label_domains: tuple[str, ...]

    @classmethod
    def job_environment(cls, *, config: dict) -> dict[str, str]:
        """Variables the backend sets in every job's environment from the cluster's config
        (Slurm: the site's slurm.conf for the commands a job runs)."""

    @classmethod
    def serving_problem(cls, *, config: dict) -> str:
        """'' when the cluster can run a deployment's replicas, else why not (the end of a
        sentence that starts with the cluster's name)."""

    def submit(self, submission: Submission) -> str:
        """Submit one attempt; return the backend's job id."""

    def jobs(self) -> list[BackendJob]:
        """Every Torus-tagged job the controller knows, in one call."""

    def accounting(self, *, tags: set[str], since: datetime) -> list[BackendJob]:
        """Finished jobs from accounting (for jobs the controller has forgotten), one call."""

    def cancel(self, backend_id: str) -> None: ...

    def clear_nice(self, backend_id: str) -> None:
        """Put a waiting job back at its submission rank in the cluster's queue (Slurm: nice
        0; a backend that never sets a nice does nothing)."""

    def ping(self) -> None:
        """Raise ClusterUnavailable unless the controller answers."""

    def inventory(self) -> tuple[list[PartitionInfo], list[NodeInfo]]: ...

    def attempt_outcome(self, job: BackendJob) -> str:
        """The AttemptState a backend state word maps to."""

    def waiting_message(self, job: BackendJob) -> str:
        """Why a pending job waits, in the platform's words: "waiting in Slurm: Resources",
        "waiting in Kueue: insufficient nvidia.com/gpu quota (position 3)"."""

    def ensure_association(self, *, user: str, account: str, parent: str) -> None:
        """Make the cluster account `account` (under `parent`) and let `user` run jobs in it;
        idempotent."""

    def account_remove(self, *, account: str) -> None:
        """Remove the cluster account `account` and every user's association with it (a
        purge); idempotent: a missing account is success. Slurm refuses while jobs of it are
        active (SubmitRejected: the purge tries again)."""

    def objects_remove(self, *, tenant: str, project: str | None, backend_ids: list[str]) -> None:
        """Remove the cluster objects a purge leaves: the attempts' (`backend_ids`) and, with
        `project`, every job object of the tenant's project (Kubernetes: Jobs, pods,
        Services, Secrets by label; the place's namespace and volumes stay, applied again as
        they are); idempotent. Nothing to do on Slurm."""

    def tenant_gpu_limit(self, *, tenant: str, account: str, gpus: int | None) -> None:
        """Hold the tenant's GPU quota in the cluster itself (None: unlimited): `tenant` is
        the tenant's slug, `account` its cluster account (the `parent` of ensure_association).
        Slurm: GrpTRES gres/gpu of the account; Kubernetes: the tenant's ClusterQueue quota
        and ResourceQuota. Idempotent; called only after the value changed."""

    def log_source(self) -> LogSource:
        """Where this cluster's attempt output is read from."""

    def usage(self, *, owners: dict[str, tuple[str, int]]) -> dict[str, JobUsage]:
        """The usage of running jobs (backend id: (user name, uid) of its submitter), read as
        each owner where the cluster asks that; jobs it cannot read are left out."""

    def serve_host(self, tag: str) -> str | None:
        """The address the engine of a running replica (its attempt's tag) listens on, as the
        cluster reports it (the replica's own serve.json must name the same); None while the
        cluster has none."""
