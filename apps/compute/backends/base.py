"""The interface every backend implements, and the plain data it exchanges with the platform."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


class ClusterUnavailable(Exception):
    """The controller did not answer: not a job failure; try again later."""


class SubmitRejected(Exception):
    """The backend refused the request for good (bad partition, impossible resources...)."""


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


@dataclass
class PartitionInfo:
    name: str
    is_default: bool
    state: str
    max_time_minutes: int | None
    node_names: list[str]


class Backend(Protocol):
    def submit(self, submission: Submission) -> str:
        """Submit one attempt; return the backend's job id."""

    def jobs(self) -> list[BackendJob]:
        """Every Torus-tagged job the controller knows, in one call."""

    def accounting(self, *, tags: set[str], since: datetime) -> list[BackendJob]:
        """Finished jobs from accounting (for jobs the controller has forgotten), one call."""

    def cancel(self, backend_id: str) -> None: ...

    def ping(self) -> None:
        """Raise ClusterUnavailable unless the controller answers."""

    def inventory(self) -> tuple[list[PartitionInfo], list[NodeInfo]]: ...

    def attempt_outcome(self, job: BackendJob) -> str:
        """The AttemptState a backend state word maps to."""

    def ensure_association(self, *, user: str, account: str, parent: str) -> None:
        """Make the cluster account `account` (under `parent`) and let `user` run jobs in it;
        idempotent."""
