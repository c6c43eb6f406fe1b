"""The Slurm backend: slurmrestd (JWT) for submit, queue and inventory; sbatch and sacct as
fallbacks. Every call here is one RPC to the controller, whatever the number of jobs.

No root program runs with a tenant's input: slurmrestd is called with a token the privileged
helper makes for the submitter, and the sbatch fallback runs as the submitter through the
helper, the job's variables only on its --export-file. The platform's own reads and sacctmgr
run as the platform's account (a Slurm operator) with a fixed environment; sstat (usage) as
each job's owner, through the helper."""

import contextlib
import fcntl
import logging
import subprocess
import threading
from collections.abc import Iterator
from datetime import datetime

import httpx
from django.conf import settings

from apps.compute.backends.base import (
    AssociationMissing,
    BackendJob,
    ClusterUnavailable,
    FileLogSource,
    JobUsage,
    NodeInfo,
    PartitionInfo,
    Submission,
    SubmitRejected,
)
from apps.compute.backends.slurm_request import (
    LAUNCHER,
    render_request,
    sbatch_options,
    submission_environment,
)
from apps.compute.backends.slurm_words import (
    OUTCOMES,
    epoch_time,
    job_order,
    node_healthy,
    parse_gres,
    parse_time,
    steps_usage,
    time_limit_minutes,
    wait_status,
)
from apps.compute.hostlist import expand
from apps.compute.models import Cluster
from apps.identity import privileged

logger = logging.getLogger(__name__)

TAG_PREFIX = "torus:"

# The only environment the platform's own Slurm commands (sacct, sacctmgr) ever get.
FIXED_PATH = "/usr/bin:/bin"
# A Slurm client's words for a controller it could not reach (the request was never taken).
UNREACHABLE = ("Unable to contact", "Connection refused")

_clients: dict[str, httpx.Client] = {}
_clients_lock = threading.Lock()


class _RestdUnreachable(ClusterUnavailable):
    """slurmrestd could not be connected to: the request was never sent."""


class SlurmBackend:
    display_name = "Slurm"
    requeues_jobs = True  # a node failure or an operator's scontrol requeue
    requires_image = False  # jobs run on the nodes' own system unless they name an image
    dataset_node_cache = True  # a directory on each node, which every job reaches
    # SBATCH_/SRUN_/SALLOC_ are read as options by Slurm's commands (in the job too: srun).
    reserved_env_prefixes = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")
    reserved_label_domains = ()

    @classmethod
    def job_environment(cls, *, config: dict) -> dict[str, str]:
        """The site's slurm.conf, for the Slurm commands a job runs (srun, scontrol)."""
        return {"SLURM_CONF": config["slurm_conf"]} if config.get("slurm_conf") else {}

    @classmethod
    def serving_problem(cls, *, config: dict) -> str:
        return ""  # the engine lies in the nodes' shared root

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
        if "Invalid account" in message:  # ESLURM_INVALID_ACCOUNT: no association (any more)
            raise AssociationMissing(f"slurmrestd: {message}")
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

    def _on_this_cluster(self) -> list[str]:
        """`cluster=<ClusterName>` from the cluster's slurm.conf: sacctmgr adds an account or
        a user to every cluster of the accounting database otherwise (one slurmdbd commonly
        serves several clusters). [] when slurm.conf names none."""
        try:
            with open(self.slurm_conf or "/etc/slurm/slurm.conf") as conf:
                for line in conf:
                    key, _, value = line.partition("=")
                    if key.strip().lower() == "clustername" and value.strip():
                        return [f"cluster={value.split('#')[0].strip()}"]
        except OSError:
            pass
        return []

    @contextlib.contextmanager
    def _accounting_change(self) -> Iterator[None]:
        """One change to slurmdbd's associations at a time on this host. slurmdbd 22.05
        numbered the association tree wrong when accounts were added and deleted at once (a
        user's association left outside its account's range), then crashed reading it; every
        process here that changes associations takes this lock on the cluster's slurm.conf
        (read-only: no file of its own to create or own)."""
        with open(self.slurm_conf or "/etc/slurm/slurm.conf", "rb") as conf:
            fcntl.flock(conf, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(conf, fcntl.LOCK_UN)

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
                environment=submission_environment(submission),
                # --export=ALL (sbatch's default): the file's variables win over the helper's
                # fixed PATH, SLURM_CONF and LANG, so the job's are exactly the submission's
                # (and sbatch's SLURM_*); --export=NONE would drop the file's (Slurm 22.05)
                export_none=False,
            )
        except privileged.HelperRefused as exc:  # a rule of the helper, or sbatch's own exit
            message = str(exc)
            if any(words in message for words in UNREACHABLE):
                raise ClusterUnavailable(message) from exc
            if "Invalid account" in message:
                raise AssociationMissing(message) from exc
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
            exit_code, signal = wait_status(job.get("exit_code"))
            found.append(
                BackendJob(
                    backend_id=str(job["job_id"]),
                    tag=comment,
                    state=str(job.get("job_state", "")).upper(),
                    reason=str(job.get("state_reason") or ""),
                    nodes=expand(job.get("nodes") or ""),
                    exit_code=exit_code,
                    signal=signal,
                    started_at=epoch_time(job.get("start_time")),
                    ended_at=epoch_time(job.get("end_time")),
                    restarts=int(job.get("restart_cnt") or 0),
                    order=job_order(job["job_id"]),
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
                    started_at=parse_time(parts[5]),
                    ended_at=parse_time(parts[6]),
                    order=job_order(parts[0]),
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
                max_time_minutes=time_limit_minutes(p.get("maximum_time")),
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

    def usage(self, *, owners: dict[str, tuple[str, int]]) -> dict[str, JobUsage]:
        """sstat of each owner's running jobs, run as that owner by the privileged helper
        (slurmd tells a step's statistics to its owner, root or SlurmUser only): one call per
        owner. An owner whose call fails is logged and left out."""
        by_owner: dict[tuple[str, int], list[int]] = {}
        for backend_id, owner in owners.items():
            if backend_id.isdigit():
                by_owner.setdefault(owner, []).append(int(backend_id))
        found: dict[str, JobUsage] = {}
        for (user, uid), jobs in by_owner.items():
            for start in range(0, len(jobs), 256):  # the helper's limit
                try:
                    out = privileged.sstat(user=user, uid=uid, jobs=jobs[start : start + 256])
                except privileged.HelperError as exc:
                    logger.info("usage of %s's jobs unread: %s", user, exc)
                    continue
                found.update(steps_usage(out))
        return found

    def serve_host(self, tag: str) -> str | None:
        """The local cluster's nodes share the portal's host: engines listen on its loopback."""
        return "127.0.0.1"

    def ensure_association(self, *, user: str, account: str, parent: str) -> None:
        """Slurm accounts per tenant (`parent`, under root) and project (`account`), and the
        user's association with the project's: slurmdbd then accounts, limits and fair-shares
        by tenant (AccountingStorageEnforce=associations refuses jobs without one)."""
        errors = []
        here = self._on_this_cluster()
        with self._accounting_change():
            for argv in (
                ["sacctmgr", "-i", "add", "account", parent, "parent=root", *here],
                ["sacctmgr", "-i", "add", "account", account, f"parent={parent}", *here],
                ["sacctmgr", "-i", "add", "user", user, f"account={account}", *here],
            ):
                try:  # exits 1 with "Nothing new added." for what exists already
                    self._run(argv)
                except SubmitRejected as exc:
                    errors.append(str(exc))
        found = self._run(
            ["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}",
             f"account={account}", *here, "format=user"]
        )  # fmt: skip
        if user not in found.split():
            raise SubmitRejected(f"no Slurm association for {user} in {account}: {errors}")

    def account_remove(self, *, account: str) -> None:
        """Delete the account with its users' associations. Slurm keeps a user's default
        account: a user whose default this is moves to another of theirs, or, with none
        left, is removed from the accounting database (added again on their next job)."""
        with self._accounting_change():
            self._remove_account(account)

    def _remove_account(self, account: str) -> None:
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
