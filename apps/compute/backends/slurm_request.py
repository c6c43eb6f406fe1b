"""How one attempt becomes a Slurm batch request: the launcher script, the job's environment,
and its resources as slurmrestd's submit body or as sbatch's options."""

from pathlib import Path

from apps.compute.backends.base import Submission, SubmitRejected

LAUNCHER = (Path(__file__).with_name("launcher.sh")).read_text()


def _check_identity(submission: Submission) -> None:
    """Jobs run as their submitter, never as root or a system account."""
    if not submission.user or submission.uid < 1000 or submission.gid < 1000:
        raise SubmitRejected("a job needs its submitter's POSIX identity; root is refused")


def submission_environment(submission: Submission) -> dict[str, str]:
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
        "environment": submission_environment(submission),
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
