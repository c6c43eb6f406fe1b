"""Jobs read dataset versions on the real Slurm cluster: the spec names them, the job finds
each read-only at $TORUS_DATASET_<AS>, the attempt records what it read, the node's cache
serves the second job, evicts under its limit, and stays closed to another tenant."""

import pytest
from django.urls import reverse

from apps.datasets.tasks import project_storage_ensure
from apps.datasets.uploads import upload_append
from apps.datasets.versions import dataset_create, version_commit, version_create
from apps.jobs.models import DatasetStage, Job
from apps.tenancy.models import Role
from tests.jobs.conftest import drive, output, submit

PROBE = """
try() {
  name=$1; shift
  if "$@" >/dev/null 2>&1; then echo "TRY $name ok"; else echo "TRY $name denied"; fi
}
"""
READ = (
    'echo "PATH $TORUS_DATASET_TRAIN"; echo "LIST $TORUS_DATASETS"; '
    'echo "DATA $(cat "$TORUS_DATASET_TRAIN/sub/a.txt")"; '
    'try write touch "$TORUS_DATASET_TRAIN/new"; '
    'try append sh -c "echo x >> \\"$TORUS_DATASET_TRAIN/sub/a.txt\\""'
)


def make_version(world, name: str, files: dict[str, bytes], *, commit: bool = True):
    project_storage_ensure(str(world.project.pk))  # what the root worker does on first need
    dataset = world.project.datasets.filter(name=name).first() or dataset_create(
        actor=None, project=world.project, name=name
    )
    version = version_create(actor=None, dataset=dataset)
    for path, data in files.items():
        upload_append(
            actor=None,
            version=version,
            path=path,
            offset=0,
            total=len(data),
            length=len(data),
            chunks=[data],
        )
    if commit:
        version = version_commit(actor=None, version=version)
    return version


def run(world, script: str, *, on: tuple = ("n1",), **spec) -> Job:
    """A job of the world's member, placed on the nodes `on` (the others excluded)."""
    body = submit(
        world.client(Role.MEMBER), world.project, command=["bash", "-c", PROBE + script], **spec
    )
    job = Job.objects.get(pk=body["id"])
    job.attempts.update(excluded_nodes=[n for n in ("n1", "n2", "n3") if n not in on])
    return drive(job.pk)


def lines(job: Job, word: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in output(job).splitlines() if line.startswith(word)]


def tries(job: Job) -> dict[str, str]:
    return dict(line.split()[1:3] for line in output(job).splitlines() if line.startswith("TRY "))


def test_a_job_reads_its_dataset_read_only_and_the_second_job_reads_the_nodes_cache(
    acme, globex, slurm_cluster, settings
):
    version = make_version(acme, "corpus", {"sub/a.txt": b"hello data", "b.bin": b"\x00" * 4096})
    spec = {"datasets": [{"version": "corpus:1", "as": "TRAIN"}]}
    first = run(acme, READ, **spec)
    assert first.state == "SUCCEEDED", (first.state_reason, output(first))
    assert lines(first, "DATA") == ["hello data"] and lines(first, "LIST") == ["TRAIN"]
    assert tries(first) == {"write": "denied", "append": "denied"}
    cached = lines(first, "PATH")[0]
    assert cached.startswith(settings.TORUS_DATASET_CACHE_ROOT + f"/n1/{acme.tenant.slug}/")
    attempt = first.attempts.get()
    assert list(attempt.dataset_versions.all()) == [version]
    stage = DatasetStage.objects.get(attempt=attempt)
    assert (stage.node, stage.cache, stage.misses, stage.hits) == ("n1", True, 2, 0)
    assert stage.bytes_staged == 10 + 4096

    second = run(acme, READ, **spec)
    assert lines(second, "DATA") == ["hello data"] and lines(second, "PATH") == [cached]
    stage = DatasetStage.objects.get(attempt__job=second)
    assert (stage.misses, stage.hits, stage.bytes_staged) == (0, 2, 0)

    # the API: on the job's attempts, and per node
    client = acme.client(Role.MEMBER)
    detail = client.get(reverse("job-detail", args=[second.pk])).json()
    shown = detail["attempts"][0]
    assert shown["dataset_versions"][0]["ref"] == "corpus:1"
    assert shown["dataset_cache"][0]["hits"] == 2
    nodes = client.get(reverse("job-dataset-cache")).json()
    assert [(n["node"], n["attempts"], n["hits"], n["misses"]) for n in nodes] == [("n1", 2, 2, 2)]
    assert globex.client(Role.MEMBER).get(reverse("job-dataset-cache")).json() == []

    # another tenant's job on the same node cannot read the cache entry (or list it)
    thief = run(
        globex,
        f'try read cat "{cached}/sub/a.txt"; try list ls "{cached}"; '
        f'try own ls "{settings.TORUS_DATASET_CACHE_ROOT}/n1"',
    )
    assert tries(thief) == {"read": "denied", "list": "denied", "own": "ok"}, output(thief)


def test_the_cache_off_reads_shared_storage_in_place_read_only(acme, slurm_cluster, settings):
    make_version(acme, "corpus", {"sub/a.txt": b"in place"})
    job = run(acme, READ, datasets=[{"version": "corpus:1", "as": "TRAIN"}], dataset_cache=False)
    assert job.state == "SUCCEEDED", output(job)
    assert lines(job, "DATA") == ["in place"]
    assert lines(job, "PATH")[0].startswith(settings.TORUS_JOB_ROOT + f"/{acme.tenant.slug}/")
    assert tries(job) == {"write": "denied", "append": "denied"}
    stage = DatasetStage.objects.get(attempt__job=job)
    assert (stage.cache, stage.misses, stage.hits) == (False, 0, 0)


def test_the_nodes_cache_evicts_the_least_recently_used_version_under_its_limit(
    acme, slurm_cluster, settings
):
    settings.TORUS_DATASET_CACHE_BYTES = 1500
    make_version(acme, "corpus", {"f.bin": b"1" * 1000})
    make_version(acme, "corpus", {"f.bin": b"2" * 1000})
    for number in (1, 2):
        job = run(
            acme,
            'echo "SUM $(cksum < "$TORUS_DATASET_TRAIN/f.bin")"',
            datasets=[{"version": f"corpus:{number}", "as": "TRAIN"}],
        )
        assert job.state == "SUCCEEDED", output(job)
    stage = DatasetStage.objects.get(attempt__job=job)
    assert (stage.misses, stage.evicted_bytes) == (1, 1000)


def test_a_node_over_its_cap_drops_another_users_least_recently_used_version(
    acme, globex, slurm_cluster, settings
):
    """Each user's subtree is under its own limit, but the node as a whole is not: before
    globex's job stages, dispatch drops acme's older version from n1 (as acme's user)."""
    from pathlib import Path

    settings.TORUS_DATASET_CACHE_NODE_BYTES = 1500
    make_version(acme, "corpus", {"f.bin": b"1" * 1000})
    make_version(globex, "corpus", {"f.bin": b"2" * 1000})
    first = run(acme, "cat $TORUS_DATASET_TRAIN/f.bin >/dev/null",
                datasets=[{"version": "corpus:1", "as": "TRAIN"}])  # fmt: skip
    assert first.state == "SUCCEEDED", output(first)
    node = Path(settings.TORUS_DATASET_CACHE_ROOT) / "n1"
    acme_versions = list(node.glob(f"{acme.tenant.slug}/*/*/versions/*"))
    assert len(acme_versions) == 1
    second = run(globex, "cat $TORUS_DATASET_TRAIN/f.bin >/dev/null",
                 datasets=[{"version": "corpus:1", "as": "TRAIN"}])  # fmt: skip
    assert second.state == "SUCCEEDED", output(second)
    assert not acme_versions[0].exists()
    assert len(list(node.glob(f"{globex.tenant.slug}/*/*/versions/*"))) == 1
    stage = DatasetStage.objects.get(attempt__job=second)
    assert (stage.misses, stage.hits) == (1, 0)


def test_a_running_jobs_staging_shows_before_it_ends(acme, slurm_cluster):
    make_version(acme, "corpus", {"sub/a.txt": b"soon"})
    body = submit(
        acme.client(Role.MEMBER),
        acme.project,
        command=["sleep", "300"],
        datasets=[{"version": "corpus:1", "as": "TRAIN"}],
    )
    job = drive(
        body["id"],
        condition=lambda job: (
            job.state == "RUNNING" and DatasetStage.objects.filter(attempt__job=job).exists()
        ),
    )
    stage = DatasetStage.objects.get(attempt__job=job)
    assert (stage.misses, stage.bytes_staged) == (1, 4)


def test_a_two_node_job_stages_on_each_of_its_nodes(acme, slurm_cluster):
    make_version(acme, "corpus", {"sub/a.txt": b"everywhere"})
    job = run(
        acme,
        'echo "DATA $SLURMD_NODENAME $(cat "$TORUS_DATASET_TRAIN/sub/a.txt")"',
        on=("n1", "n2"),
        datasets=[{"version": "corpus:1", "as": "TRAIN"}],
        resources={"nodes": 2},
    )
    assert job.state == "SUCCEEDED", output(job)
    assert sorted(lines(job, "DATA")) == ["n1 everywhere", "n2 everywhere"]
    stages = DatasetStage.objects.filter(attempt__job=job).order_by("node")
    assert [(s.node, s.misses, s.bytes_staged) for s in stages] == [("n1", 1, 10), ("n2", 1, 10)]


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("corpus:9", "No such dataset version"),
        ("corpus:2", "not committed"),
        ("00000000-0000-0000-0000-000000000000", "No such dataset version"),
        ("../etc:1", "Give '<dataset name>:<version number>'"),
    ],
)
def test_a_missing_uncommitted_or_malformed_version_is_a_400(acme, ref, message):
    make_version(acme, "corpus", {"a": b"a"})
    make_version(acme, "corpus", {"a": b"b"}, commit=False)
    response = acme.client(Role.MEMBER).post(
        reverse("job-list"),
        {
            "project": str(acme.project.id),
            "name": "t",
            "command": ["true"],
            "datasets": [{"version": ref, "as": "TRAIN"}],
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert message in str(fields["datasets"]["0"]["version"])
    assert not Job.objects.exists()


def test_another_tenants_version_is_a_400_and_bad_names_are_refused(acme, globex):
    theirs = make_version(globex, "secret", {"a": b"a"})
    client = acme.client(Role.MEMBER)
    body = {"project": str(acme.project.id), "name": "t", "command": ["true"]}
    response = client.post(
        reverse("job-list"),
        {**body, "datasets": [{"version": str(theirs.pk), "as": "TRAIN"}]},
        format="json",
    )
    assert response.status_code == 400
    assert "No such dataset version" in str(response.json()["error"]["fields"])
    for bad in ({"version": "x:1", "as": "lower"}, {"version": "x:1"}):
        response = client.post(reverse("job-list"), {**body, "datasets": [bad]}, format="json")
        assert response.status_code == 400, bad
    twice = [{"version": "x:1", "as": "A"}, {"version": "x:2", "as": "A"}]
    response = client.post(reverse("job-list"), {**body, "datasets": twice}, format="json")
    assert response.status_code == 400
    assert not Job.objects.exists()


def test_datasets_as_a_stored_spec_shows_them_can_be_submitted_again(acme, cluster):
    version = make_version(acme, "corpus", {"a": b"a"})
    client = acme.client(Role.MEMBER)
    datasets_spec = [{"version": "corpus:1", "as": "TRAIN"}]
    first = submit(client, acme.project, command=["true"], datasets=datasets_spec)
    shown = client.get(reverse("job-detail", args=[first["id"]])).json()["spec"]["datasets"]
    assert shown == [{"version": str(version.pk), "ref": "corpus:1", "as": "TRAIN"}]
    again = submit(client, acme.project, command=["true"], datasets=shown)
    assert again["spec"]["datasets"] == shown
