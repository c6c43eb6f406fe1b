"""The Slurm backend: slurmrestd (JWT) for submit, queue and inventory; sbatch and sacct as
fallbacks. Every call here is one RPC to the controller, whatever the number of jobs.

No root program runs with a tenant's input: slurmrestd is called with a token the privileged
helper makes for the submitter, and the sbatch fallback runs as the submitter through the
helper, the job's variables only on its --export-file. The platform's own reads and sacctmgr
run as the platform's account (a Slurm operator) with a fixed environment."""

import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
from django.conf import settings

from apps.compute.backends.base import (
    BackendJob,
    ClusterUnavailable,
    FileLogSource,
    NodeInfo,
    PartitionInfo,
    Submission,
    SubmitRejected,
)
from apps.compute.hostlist import expand
from apps.compute.models import Cluster
from apps.identity import privileged

LAUNCHER = (Path(__file__).with_name("launcher.sh")).read_text()
TAG_PREFIX = "torus:"

# Slurm's job state words -> the attempt states of apps/jobs/models.py.
OUTCOMES = {
    "PENDING": "SUBMITTED",
    "CONFIGURING": "SUBMITTED",
    "REQUEUED": "SUBMITTED",
    "REQUEUE_FED": "SUBMITTED",
    "REQUEUE_HOLD": "SUBMITTED",
    "RESV_DEL_HOLD": "SUBMITTED",
    "SUSPENDED": "RUNNING",
    "RUNNING": "RUNNING",
    "COMPLETING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "SIGNALING": "RUNNING",
    "COMPLETED": "SUCCEEDED",
    "FAILED": "FAILED",
    "OUT_OF_MEMORY": "FAILED",
    "SPECIAL_EXIT": "FAILED",
    "CANCELLED": "CANCELLED",
    "REVOKED": "CANCELLED",
    "TIMEOUT": "TIMEOUT",
    "DEADLINE": "TIMEOUT",
    "NODE_FAIL": "NODE_FAIL",
    "BOOT_FAIL": "NODE_FAIL",
    "PREEMPTED": "PREEMPTED",
}

# Node state words of a node that cannot run work: its attempts are restarted elsewhere.
UNHEALTHY_NODE_WORDS = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "UNKNOWN")

# The only environment the platform's own Slurm commands (sacct, sacctmgr) ever get.
FIXED_PATH = "/usr/bin:/bin"
# A Slurm client's words for a controller it could not reach (the request was never taken).
UNREACHABLE = ("Unable to contact", "Connection refused")

_clients: dict[str, httpx.Client] = {}
_clients_lock = threading.Lock()


def _check_identity(submission: Submission) -> None:
    """Jobs run as their submitter, never as root or a system account."""
    if not submission.user or submission.uid < 1000 or submission.gid < 1000:
        raise SubmitRejected("a job needs its submitter's POSIX identity; root is refused")


def job_environment(submission: Submission) -> dict[str, str]:
    """The job's whole environment: the submission's variables and its secrets (which are
    never in `environment`, the database or any argv). It only ever reaches the job."""
    return {**submission.environment, **submission.secrets}


def render_request(submission: Submission) -> dict:
    """The slurmrestd job-submit body. User values only ever appear as JSON data. The job
    runs as the user the request is made for (its token, _call); the process's primary group
    is the user's own, and its files take the project's group from the setgid directories
    (openapi/v0.0.38 has no group field; sbatch --gid sets it)."""
    _check_identity(submission)
    job: dict = {
        "name": submission.name,
        "comment": submission.tag,
        "account": submission.account,
        "environment": job_environment(submission),
        "current_working_directory": submission.working_dir,
        "standard_output": submission.stdout_path,
        "standard_error": submission.stderr_path,
        "nodes": [submission.nodes, submission.nodes],
        "tasks": submission.nodes * submission.tasks_per_node,
        "tasks_per_node": submission.tasks_per_node,
        "cpus_per_task": submission.cpus_per_task,
        "memory_per_node": submission.memory_mb_per_node,
        "time_limit": submission.time_limit_minutes,
        "requeue": False,  # the platform restarts failed attempts itself, from checkpoints
    }
    if submission.partition:
        job["partition"] = submission.partition
    if submission.accelerators_per_node:
        job["gres"] = gres_request(submission)
    if submission.nice > 0:
        job["nice"] = int(submission.nice)
    # openapi/v0.0.38 has no field for excluded nodes: such attempts go through sbatch.
    return {"script": LAUNCHER, "job": job}


def gres_request(submission: Submission) -> str:
    """Per-node generic resources, e.g. 'gpu:2' or 'gpu:a100:2'."""
    parts = [submission.accelerator]
    if submission.accelerator_type:
        parts.append(submission.accelerator_type)
    return ":".join([*parts, str(submission.accelerators_per_node)])


def sbatch_options(submission: Submission) -> list[str]:
    """The same request as sbatch options for the privileged helper, which runs sbatch as the
    submitter (its uid, the project's group as the primary group: the job's group, as sbatch
    --gid set it before). Each value is one argv item, never shell text; no --uid, --gid or
    --export (the helper refuses them: the job's variables go on its --export-file)."""
    _check_identity(submission)
    argv = [
        "--parsable",
        "--no-requeue",
        f"--account={submission.account}",
        f"--job-name={submission.name}",
        f"--comment={submission.tag}",
        f"--chdir={submission.working_dir}",
        f"--output={submission.stdout_path}",
        f"--error={submission.stderr_path}",
        f"--nodes={submission.nodes}",
        f"--ntasks-per-node={submission.tasks_per_node}",
        f"--cpus-per-task={submission.cpus_per_task}",
        f"--mem={submission.memory_mb_per_node}M",
        f"--time={submission.time_limit_minutes}",
    ]
    if submission.partition:
        argv.append(f"--partition={submission.partition}")
    if submission.accelerators_per_node:
        argv.append(f"--gres={gres_request(submission)}")
    if submission.exclude_nodes:
        argv.append(f"--exclude={','.join(submission.exclude_nodes)}")
    if submission.nice > 0:
        argv.append(f"--nice={int(submission.nice)}")
    return argv


def _epoch(value) -> datetime | None:
    if isinstance(value, dict):  # newer API versions wrap numbers
        value = value.get("number") if value.get("set", True) else None
    if not value:
        return None
    return datetime.fromtimestamp(int(value), tz=UTC)


def _order(job_id: str) -> int:
    """Slurm's job ids grow: the highest is the newest (an array task '12_3' counts as 12)."""
    head = str(job_id).split("_")[0].split("+")[0]
    return int(head) if head.isdigit() else 0


def node_healthy(state: str) -> bool:
    return not any(word in state.upper() for word in UNHEALTHY_NODE_WORDS)


def _wait_status(raw) -> tuple[int | None, int | None]:
    """slurmrestd's exit_code is the raw wait status: exit code << 8 | signal."""
    if raw is None:
        return None, None
    raw = int(raw)
    return raw >> 8, (raw & 0x7F) or None


class _RestdUnreachable(ClusterUnavailable):
    """slurmrestd could not be connected to: the request was never sent."""


class SlurmBackend:
    display_name = "Slurm"
    requeues_jobs = True  # a node failure or an operator's scontrol requeue

    def __init__(self, cluster: Cluster):
        config = cluster.config or {}
        self.cluster = cluster
        self.url = config.get("restd_url", "http://127.0.0.1:16820").rstrip("/")
        self.version = config.get("api_version", "v0.0.38")
        # The platform's reads act as its own account, a Slurm operator (never root: a
        # cluster registered before kept "root" in its config).
        user = config.get("user") or settings.TORUS_SERVICE_USER
        self.user = settings.TORUS_SERVICE_USER if user == "root" else user
        self.slurm_conf = config.get("slurm_conf", "")
        self.timeout = float(config.get("timeout", 20))

    # -- transport ---------------------------------------------------------------------

    def _token(self, user: str) -> str:
        """A JWT for `user`, made by the privileged helper (only it reads the key)."""
        try:
            return privileged.slurm_token(user=user)
        except privileged.HelperRefused as exc:  # e.g. a name outside the uid range: for good
            raise SubmitRejected(f"no Slurm token for {user}: {exc}") from exc
        except privileged.HelperError as exc:  # not reached, or the key could not be read
            raise ClusterUnavailable(f"no Slurm token for {user}: {exc}") from exc

    def _client(self) -> httpx.Client:
        with _clients_lock:
            client = _clients.get(self.url)
            if client is None or client.is_closed:
                client = httpx.Client(
                    base_url=self.url,
                    timeout=self.timeout,
                    limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
                )
                _clients[self.url] = client
            return client

    def _call(self, method: str, path: str, *, json=None, user: str | None = None) -> dict:
        """One slurmrestd request, as `user` (a job's submitter) or the platform's own user."""
        user = user or self.user
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": self._token(user)}
        try:
            response = self._send(method, path, json=json, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # never sent: nothing done
            raise _RestdUnreachable(f"slurmrestd at {self.url}: {exc}") from exc
        except httpx.HTTPError as exc:  # sent, perhaps done: the outcome is unknown
            raise ClusterUnavailable(f"slurmrestd at {self.url}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = {}
        errors = [e for e in body.get("errors", []) if e.get("error_number") or e.get("error")]
        if not errors and response.status_code < 400:
            return body
        message = (
            "; ".join(str(e.get("error") or e.get("description") or e) for e in errors)
            or f"HTTP {response.status_code}"
        )
        # Slurm's own error numbers (2000s: the request; 9000s: its parsing) refuse this
        # request for good; anything else (auth, controller down, bare 5xx) is transient.
        numbers = [int(e.get("error_number") or 0) for e in errors]
        if any(2000 <= n < 3000 or 9000 <= n < 10000 for n in numbers):
            raise SubmitRejected(message)
        raise ClusterUnavailable(f"slurmrestd: {message}")

    def _send(self, method: str, path: str, *, json, headers: dict) -> httpx.Response:
        """Send once; a read (GET) that met a pooled connection slurmrestd had closed (a reset,
        an empty answer) is sent again once on a fresh one: it changes nothing."""
        url = f"/slurm/{self.version}{path}"
        try:
            return self._client().request(method, url, json=json, headers=headers)
        except (httpx.ReadError, httpx.RemoteProtocolError):
            if method != "GET":
                raise
        return self._client().request(method, url, json=json, headers=headers)

    def _run(self, argv: list[str]) -> str:
        """One of the platform's own Slurm commands (sacct, sacctmgr), as the calling process
        (the platform's account) with a fixed environment: never a submission's."""
        env = {"PATH": FIXED_PATH, "SLURM_CONF": self.slurm_conf}
        try:
            result = subprocess.run(  # noqa: S603 (argv list, no shell)
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=env,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ClusterUnavailable(f"{argv[0]}: {exc}") from exc
        if result.returncode != 0:
            message = result.stderr.strip() or f"{argv[0]} exited {result.returncode}"
            if any(words in message for words in UNREACHABLE):
                raise ClusterUnavailable(message)
            raise SubmitRejected(message)
        return result.stdout

    # -- the interface -----------------------------------------------------------------

    def submit(self, submission: Submission) -> str:
        if submission.exclude_nodes:
            return self.submit_with_sbatch(submission)
        try:
            body = self._call(
                "POST", "/job/submit", json=render_request(submission), user=submission.user
            )
        except _RestdUnreachable:
            # sbatch only when slurmrestd was not reached. A request that timed out may still
            # reach slurmctld: submitting again would run the job twice (the soak found it
            # with slurmctld killed). That one stays SUBMITTING, and the dispatcher's
            # recovery adopts or releases it once slurmctld answers (apps/jobs/dispatch.py).
            return self.submit_with_sbatch(submission)
        return str(body["job_id"])

    def submit_with_sbatch(self, submission: Submission) -> str:
        """sbatch run by the privileged helper as the submitter, in the helper's own fixed
        environment; the job's variables reach the job only through --export-file."""
        options = sbatch_options(submission)
        try:
            out = privileged.sbatch(
                user=submission.user,
                uid=submission.uid,
                gid=submission.gid,
                options=options,
                script=LAUNCHER,
                environment=job_environment(submission),
                # --export=ALL (sbatch's default): the file's variables win over the helper's
                # fixed PATH, SLURM_CONF and LANG, so the job's are exactly the submission's
                # (and sbatch's SLURM_*); --export=NONE would drop the file's (Slurm 22.05)
                export_none=False,
            )
        except privileged.HelperRefused as exc:  # a rule of the helper, or sbatch's own exit
            message = str(exc)
            if any(words in message for words in UNREACHABLE):
                raise ClusterUnavailable(message) from exc
            raise SubmitRejected(message) from exc
        except privileged.HelperError as exc:  # not reached, or sbatch could not be started
            raise ClusterUnavailable(f"sbatch: {exc}") from exc
        return out.strip().split(";")[0]

    def jobs(self) -> list[BackendJob]:
        body = self._call("GET", "/jobs")
        found = []
        for job in body.get("jobs", []):
            comment = job.get("comment") or ""
            if not comment.startswith(TAG_PREFIX):
                continue
            exit_code, signal = _wait_status(job.get("exit_code"))
            found.append(
                BackendJob(
                    backend_id=str(job["job_id"]),
                    tag=comment,
                    state=str(job.get("job_state", "")).upper(),
                    reason=str(job.get("state_reason") or ""),
                    nodes=expand(job.get("nodes") or ""),
                    exit_code=exit_code,
                    signal=signal,
                    started_at=_epoch(job.get("start_time")),
                    ended_at=_epoch(job.get("end_time")),
                    restarts=int(job.get("restart_cnt") or 0),
                    order=_order(job["job_id"]),
                    nice=int(job.get("nice") or 0),
                )
            )
        return found

    def accounting(self, *, tags: set[str], since: datetime) -> list[BackendJob]:
        if not tags:
            return []
        out = self._run(
            [
                "sacct",
                "-a",
                "-X",
                "-P",
                "-n",
                "--duplicates",
                "-S",
                since.strftime("%Y-%m-%dT%H:%M:%S"),
                "-o",
                "JobID,State,ExitCode,Comment,NodeList,Start,End,Reason",
            ]
        )
        found = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) < 8 or parts[3] not in tags:
                continue
            code, _, signal = parts[2].partition(":")
            found.append(
                BackendJob(
                    backend_id=parts[0],
                    tag=parts[3],
                    state=parts[1].split()[0].upper(),
                    reason=parts[7] if parts[7] != "None" else "",
                    nodes=expand(parts[4]) if parts[4] != "None assigned" else [],
                    exit_code=int(code) if code.isdigit() else None,
                    signal=int(signal) if signal.isdigit() and int(signal) else None,
                    started_at=_parse_time(parts[5]),
                    ended_at=_parse_time(parts[6]),
                    order=_order(parts[0]),
                )
            )
        return found

    def ping(self) -> None:
        self._call("GET", "/ping")

    def cancel(self, backend_id: str) -> None:
        self._call("DELETE", f"/job/{int(backend_id)}")

    def clear_nice(self, backend_id: str) -> None:
        self._call("POST", f"/job/{int(backend_id)}", json={"nice": 0})

    def inventory(self) -> tuple[list[PartitionInfo], list[NodeInfo]]:
        nodes_body = self._call("GET", "/nodes")
        parts_body = self._call("GET", "/partitions")
        nodes = [
            NodeInfo(
                name=node["name"],
                address=node.get("address") or "",
                partitions=list(node.get("partitions") or []),
                cpus=int(node.get("cpus") or 0),
                memory_mb=int(node.get("real_memory") or 0),
                accelerators=parse_gres(node.get("gres") or ""),
                accelerators_in_use=parse_gres(node.get("gres_used") or ""),
                state=str(node.get("state") or "").upper(),
                reason=str(node.get("reason") or ""),
                healthy=node_healthy(str(node.get("state") or "")),
            )
            for node in nodes_body.get("nodes", [])
        ]
        partitions = [
            PartitionInfo(
                name=p["name"],
                is_default="default" in [f.lower() for f in p.get("flags", [])],
                state=str(p.get("state") or "").upper(),
                max_time_minutes=_max_time(p.get("maximum_time")),
                node_names=expand(p.get("nodes") or ""),
            )
            for p in parts_body.get("partitions", [])
        ]
        return partitions, nodes

    def attempt_outcome(self, job: BackendJob) -> str:
        return OUTCOMES.get(job.state, "SUBMITTED")

    def waiting_message(self, job: BackendJob) -> str:
        shown = job.reason if job.reason not in ("", "None") else ""
        if shown.startswith("AssocGrpGRES"):  # the tenant GPU limit (apps/jobs/cluster_limits.py)
            return f"waiting in Slurm: the tenant's GPU quota is in use ({shown})"
        return f"waiting in Slurm: {shown}" if shown else "waiting in Slurm"

    def log_source(self) -> FileLogSource:
        """--output and --error files in the job's directory on the shared storage."""
        return FileLogSource()

    def serve_host(self, tag: str) -> str | None:
        """The local cluster's nodes share the portal's host: engines listen on its loopback."""
        return "127.0.0.1"

    def ensure_association(self, *, user: str, account: str, parent: str) -> None:
        """Slurm accounts per tenant (`parent`, under root) and project (`account`), and the
        user's association with the project's: slurmdbd then accounts, limits and fair-shares
        by tenant (AccountingStorageEnforce=associations refuses jobs without one)."""
        errors = []
        for argv in (
            ["sacctmgr", "-i", "add", "account", parent, "parent=root"],
            ["sacctmgr", "-i", "add", "account", account, f"parent={parent}"],
            ["sacctmgr", "-i", "add", "user", user, f"account={account}"],
        ):
            try:  # exits 1 with "Nothing new added." for what exists already
                self._run(argv)
            except SubmitRejected as exc:
                errors.append(str(exc))
        found = self._run(
            ["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}",
             f"account={account}", "format=user"]
        )  # fmt: skip
        if user not in found.split():
            raise SubmitRejected(f"no Slurm association for {user} in {account}: {errors}")

    def account_remove(self, *, account: str) -> None:
        """Delete the account with its users' associations. Slurm keeps a user's default
        account: a user whose default this is moves to another of theirs, or, with none
        left, is removed from the accounting database (added again on their next job)."""
        listed = self._run(
            ["sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={account}",
             "format=user"]
        )  # fmt: skip
        for user in sorted({u for u in listed.split() if u}):
            default = self._run(
                ["sacctmgr", "-n", "-P", "show", "user", "where", f"name={user}",
                 "format=defaultaccount"]
            ).strip()  # fmt: skip
            if default != account:
                continue
            others = self._run(
                ["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}",
                 "format=account"]
            ).split()  # fmt: skip
            others = sorted({a for a in others if a and a != account})
            if others:
                argv = ["sacctmgr", "-i", "modify", "user", "where", f"name={user}", "set",
                        f"defaultaccount={others[0]}"]  # fmt: skip
            else:
                argv = ["sacctmgr", "-i", "delete", "user", f"name={user}"]
            self._run(argv)
        try:
            self._run(["sacctmgr", "-i", "delete", "account", f"name={account}"])
        except SubmitRejected as exc:  # exits 1 with "Nothing deleted" when it is gone
            if "nothing deleted" not in str(exc).lower():
                raise

    def objects_remove(self, *, tenant: str, project: str | None, backend_ids: list[str]) -> None:
        """Nothing: a Slurm job leaves no object once cancelled."""

    def tenant_gpu_limit(self, *, tenant: str, account: str, gpus: int | None) -> None:
        """GrpTRES gres/gpu of the tenant's account (None: unlimited); takes effect where the
        cluster enforces limits (AccountingStorageEnforce=limits)."""
        value = "-1" if gpus is None else str(int(gpus))
        try:
            self._run(
                ["sacctmgr", "-i", "modify", "account", "where", f"name={account}", "set",
                 f"GrpTRES=gres/gpu={value}"]
            )  # fmt: skip
        except SubmitRejected as exc:  # exits 1 with "Nothing modified" when already so
            if "nothing" not in str(exc).lower():
                raise


def parse_gres(text: str) -> dict[str, dict[str, int]]:
    """'gpu:a100:4(S:0-1),gpu:2' -> {'gpu': {'a100': 4, '': 2}} (counts only)."""
    result: dict[str, dict[str, int]] = {}
    for item in filter(None, (text or "").split(",")):
        item = item.split("(")[0]
        fields = item.split(":")
        if len(fields) < 2 or not fields[-1].isdigit():
            continue
        name, count = fields[0], int(fields[-1])
        kind = fields[1] if len(fields) == 3 else ""
        result.setdefault(name, {})
        result[name][kind] = result[name].get(kind, 0) + count
    return result


def _max_time(value) -> int | None:
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if value in (None, "", "UNLIMITED") or (isinstance(value, int) and value >= 0xFFFFFFFE):
        return None
    return int(value)


def _parse_time(value: str) -> datetime | None:
    if not value or value in ("Unknown", "None"):
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
