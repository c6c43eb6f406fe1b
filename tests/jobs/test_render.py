"""The batch request boundary: whatever a user writes, the request carries it only as data.

Hypothesis generates hostile specs; the rendered slurmrestd body must keep the launcher
script byte-identical, carry every value exactly once in JSON data, and parse back to exactly
the expected fields.
"""

import base64
import dataclasses
import json
import re
import subprocess
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.compute.backends.base import SubmitRejected
from apps.compute.backends.slurm_request import LAUNCHER, render_request, sbatch_options
from apps.compute.models import Cluster
from apps.identity.services import JobIdentity
from apps.jobs.dispatch import build_submission
from apps.jobs.models import Job, JobAttempt
from apps.jobs.spec import JobSpecSerializer, normalise
from apps.tenancy.models import Project, Tenant

HOSTILE = st.sampled_from(
    [
        "\n#SBATCH --uid=0",
        "$(touch /tmp/pwned)",
        "`id`",
        "'",
        '"',
        "\\",
        "; rm -rf /",
        "\r",
        "%j",
        "--export=ALL",
        "\t",
        "${IFS}",
        "é",
        "\U0001f600",
        " ",
    ]
)
TEXT = st.lists(st.one_of(HOSTILE, st.text(max_size=12)), max_size=4).map("".join)
ARG = TEXT.filter(lambda s: "\x00" not in s)
SBATCH_OPTIONS = {
    "job-name",
    "comment",
    "chdir",
    "output",
    "error",
    "nodes",
    "ntasks-per-node",
    "cpus-per-task",
    "mem",
    "time",
    "partition",
    "gres",
    "exclude",
    "account",
    "nice",
}
JOB_KEYS = {
    "name",
    "comment",
    "environment",
    "current_working_directory",
    "standard_output",
    "standard_error",
    "nodes",
    "tasks",
    "tasks_per_node",
    "cpus_per_task",
    "memory_per_node",
    "time_limit",
    "requeue",
    "partition",
    "gres",
    "account",
    "nice",
}
IDENTITY = JobIdentity(user="alice", uid=200001, gid=300002, tenant_gid=300001, account="p-t_p")


def _submission(spec: dict):
    tenant = Tenant(slug="t")
    job = Job(
        id=uuid.uuid4(),
        tenant=tenant,
        project=Project(slug="p", tenant=tenant),
        name=spec["name"],
        spec=spec,
        checkpoint_dir="/ck",
        partition="gpu",
    )
    attempt = JobAttempt(id=uuid.uuid4(), job=job, number=1, stdout_path="/o", stderr_path="/e")
    return attempt, build_submission(attempt, Cluster(name="c", config={}), IDENTITY)


# the launcher's own line that turns TORUS_ARGV back into words
ARGV_LOOP = next(line.strip() for line in LAUNCHER.splitlines() if "in $TORUS_ARGV;" in line)


def _decode(words: str) -> list[str]:
    """TORUS_ARGV as the launcher's line rebuilds it, run by bash."""
    script = f'set -euo pipefail; args=(); {ARGV_LOOP}; printf "%s\\0" "${{args[@]}}"'
    done = subprocess.run(
        ["/bin/bash", "-c", script], env={"TORUS_ARGV": words}, capture_output=True, check=True
    )
    return done.stdout.decode().split("\0")[:-1]


@settings(max_examples=300, deadline=None)
@given(
    argv=st.lists(ARG, min_size=1, max_size=5).filter(lambda a: a[0] != ""),
    env=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), ARG, max_size=4),
    name=st.one_of(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True), TEXT),
    labels=st.one_of(st.just({}), st.dictionaries(TEXT, TEXT, max_size=2)),
)
def test_rendered_request_carries_user_values_only_as_data(argv, env, name, labels):
    data = {
        "project": str(uuid.uuid4()),
        "name": name,
        "command": argv,
        "env": env,
        "labels": labels,
        "resources": {"gpus_per_node": 1, "nodes": 2},
    }
    serializer = JobSpecSerializer(data=data)
    if not serializer.is_valid():
        # Refused input never reaches a renderer; what is refused must be genuinely unsafe.
        errors = serializer.errors
        assert set(errors) <= {"name", "env", "labels"}, errors
        return
    spec = normalise(dict(serializer.validated_data))
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", spec["name"])
    attempt, submission = _submission(spec)
    body = render_request(submission)

    assert body["script"] == LAUNCHER
    assert set(body) == {"script", "job"}
    assert set(body["job"]) <= JOB_KEYS
    assert json.loads(json.dumps(body)) == body
    job = body["job"]
    assert job["name"] == spec["name"]
    assert job["comment"] == attempt.tag
    environment = job["environment"]
    for key, value in env.items():
        assert environment[key] == value
    assert re.fullmatch(r"[A-Za-z0-9_./:=@+,\\ -]+", environment["TORUS_ARGV"])  # no syntax
    assert _decode(environment["TORUS_ARGV"]) == argv
    assert job["nodes"] == [2, 2] and job["gres"] == "gpu:1" and job["requeue"] is False

    # the sbatch fallback's options (the helper runs sbatch as the submitter): the helper's
    # allowlist only, never an identity or the environment, which goes on --export-file
    argv_out = sbatch_options(submission)
    assert argv_out[:2] == ["--parsable", "--no-requeue"]
    options = dict(item[2:].split("=", 1) for item in argv_out[2:])
    assert set(options) <= SBATCH_OPTIONS
    assert options["job-name"] == spec["name"] and options["comment"] == attempt.tag
    assert all("\n" not in item for item in argv_out)
    # whatever the spec says, the job is charged to the project
    assert options["account"] == "p-t_p"
    assert job["account"] == "p-t_p" and environment["USER"] == "alice"


@settings(max_examples=200, deadline=None)
@given(script=TEXT.filter(lambda s: s.strip() and "\x00" not in s))
def test_script_bodies_travel_base64_encoded(script):
    data = {"project": str(uuid.uuid4()), "name": "s", "command": script}
    serializer = JobSpecSerializer(data=data)
    assert serializer.is_valid(), serializer.errors
    _, submission = _submission(normalise(dict(serializer.validated_data)))
    body = render_request(submission)
    assert body["script"] == LAUNCHER
    assert base64.b64decode(body["job"]["environment"]["TORUS_SCRIPT_B64"]).decode() == script


def test_a_submission_without_a_user_identity_is_refused():
    serializer = JobSpecSerializer(
        data={"project": str(uuid.uuid4()), "name": "r", "command": ["id"]}
    )
    assert serializer.is_valid(), serializer.errors
    spec = normalise(dict(serializer.validated_data))
    _, submission = _submission(spec)
    for who in ({"user": "", "uid": 0, "gid": 0}, {"user": "root", "uid": 0, "gid": 0}):
        as_root = dataclasses.replace(submission, **who)
        with pytest.raises(SubmitRejected):
            render_request(as_root)
        with pytest.raises(SubmitRejected):
            sbatch_options(as_root)


def test_the_launcher_has_no_directives():
    assert "#SBATCH" not in LAUNCHER


def test_secrets_go_into_the_jobs_environment_only():
    serializer = JobSpecSerializer(
        data={"project": str(uuid.uuid4()), "name": "s", "command": ["id"], "env": {"A": "1"}}
    )
    assert serializer.is_valid(), serializer.errors
    _, submission = _submission(normalise(dict(serializer.validated_data)))
    submission = dataclasses.replace(submission, secrets={"HF_TOKEN": "hf_value"})
    environment = render_request(submission)["job"]["environment"]
    assert environment["HF_TOKEN"] == "hf_value" and environment["A"] == "1"
    assert "hf_value" not in json.dumps(sbatch_options(submission))
    assert "HF_TOKEN" not in submission.environment
