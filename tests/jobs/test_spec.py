"""The job spec: defaults, field-by-field errors, YAML, and nothing half-written."""

import pytest
import yaml
from django.urls import reverse

from apps.jobs.models import Job
from apps.jobs.spec import JobSpecSerializer, normalise
from apps.tenancy.models import Role

pytestmark = pytest.mark.django_db


def minimal(project) -> dict:
    return {
        "project": str(project.id),
        "name": "hello",
        "command": ["bash", "-c", "echo hello"],
        "resources": {"gpus_per_node": 1},
    }


def test_the_minimal_example_is_a_complete_job(acme, cluster):
    response = acme.client(Role.MEMBER).post(reverse("job-list"), minimal(acme.project))
    assert response.status_code == 201, response.content
    job = response.json()
    assert job["state"] == "QUEUED" and job["gpus"] == 1 and job["cluster"] == "test"
    spec = job["spec"]
    assert spec["resources"] == {
        "nodes": 1,
        "tasks_per_node": 1,
        "gpus_per_node": 1,
        "gpu_type": None,
        "accelerator": "gpu",
        "cpus_per_task": 1,
        "memory": 1024,
        "time_limit": 60,
        "partition": None,
    }
    assert spec["distributed"] == {"launcher": "none"}
    assert spec["restart_policy"]["max_restarts"] == 3
    assert spec["restart_policy"]["retry_on"] == ["node_failure", "preemption"]
    assert [e["to_state"] for e in job["events"]] == ["PENDING", "QUEUED"]
    assert [a["number"] for a in job["attempts"]] == [1]
    detail = acme.client(Role.VIEWER).get(reverse("job-detail", kwargs={"pk": job["id"]}))
    assert detail.json()["state"] == "QUEUED"


def test_yaml_is_accepted(acme, cluster):
    body = yaml.safe_dump(
        {**minimal(acme.project), "resources": {"memory": "2G", "time_limit": "01:30:00"}}
    )
    response = acme.client(Role.MEMBER).generic(
        "POST", reverse("job-list"), body, content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    assert response.json()["spec"]["resources"]["memory"] == 2048
    assert response.json()["spec"]["resources"]["time_limit"] == 90


@pytest.mark.parametrize(
    ("change", "field_path"),
    [
        ({"name": "bad name!"}, ["name"]),
        ({"command": []}, ["command"]),
        ({"command": ["ok", 3]}, ["command"]),
        ({"command": "echo\x00hi"}, ["command"]),
        ({"env": {"1BAD": "x"}}, ["env", "1BAD"]),
        ({"env": {"RANK": "3"}}, ["env", "RANK"]),
        ({"env": {"SLURM_JOB_ID": "3"}}, ["env", "SLURM_JOB_ID"]),
        ({"env": {"OK": "a\x00b"}}, ["env", "OK"]),
        ({"labels": {"Team": "x"}}, ["labels", "Team"]),
        ({"labels": {"team": "a b"}}, ["labels", "team"]),
        ({"resources": {"gpus_per_node": 99}}, ["resources", "gpus_per_node"]),
        ({"resources": {"memory": "lots"}}, ["resources", "memory"]),
        ({"resources": {"time_limit": "soon"}}, ["resources", "time_limit"]),
        ({"resources": {"partition": "gpu\n#SBATCH --uid=0"}}, ["resources", "partition"]),
        ({"resources": {"gpu_type": "a100;rm"}}, ["resources", "gpu_type"]),
        ({"distributed": {"launcher": "horovod"}}, ["distributed", "launcher"]),
        ({"restart_policy": {"retry_on": ["always"]}}, ["restart_policy", "retry_on"]),
        ({"environment": {"type": "venv"}}, ["environment", "path"]),
        ({"environment": {"type": "venv", "path": "relative/env"}}, ["environment", "path"]),
        ({"working_dir": "/tmp\n#SBATCH"}, ["working_dir"]),
        ({"resources": {"nodes": 2, "colour": "red"}}, ["resources", "colour"]),
        ({"priority": "high"}, ["priority"]),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(acme, cluster, change, field_path):
    body = {**minimal(acme.project), **change}
    response = acme.client(Role.MEMBER).post(reverse("job-list"), body)
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    for key in field_path:
        assert key in fields, (field_path, fields)
        fields = fields[key]
    assert Job.objects.count() == 0


def test_a_request_no_partition_can_ever_fit_is_a_400(acme, cluster):
    body = {**minimal(acme.project), "resources": {"nodes": 3, "gpus_per_node": 1}}
    response = acme.client(Role.MEMBER).post(reverse("job-list"), body)
    assert response.status_code == 400
    assert "No partition has 3 node(s)" in response.json()["error"]["fields"]["resources"][0]
    body = {**minimal(acme.project), "resources": {"gpus_per_node": 4, "gpu_type": "h100"}}
    assert acme.client(Role.MEMBER).post(reverse("job-list"), body).status_code == 400
    assert Job.objects.count() == 0


def test_containers_are_refused_where_no_cluster_runs_them(acme, cluster):
    body = {**minimal(acme.project), "environment": {"type": "container", "image": "pytorch:2"}}
    response = acme.client(Role.MEMBER).post(reverse("job-list"), body)
    assert response.status_code == 400
    assert "environment" in response.json()["error"]["fields"]


def test_members_outside_the_project_cannot_submit_there(acme, cluster):
    from tests.factories import ProjectFactory

    other = ProjectFactory(tenant=acme.tenant)
    response = acme.client(Role.MEMBER).post(reverse("job-list"), minimal(other))
    assert response.status_code == 403
    assert acme.client(Role.ADMIN).post(reverse("job-list"), minimal(other)).status_code == 201


def test_another_tenants_project_is_not_found(acme, globex, cluster):
    response = globex.client(Role.OWNER).post(reverse("job-list"), minimal(acme.project))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert Job.objects.count() == 0


def test_script_bodies_and_durations_normalise():
    data = {
        "project": "00000000-0000-0000-0000-000000000001",
        "name": "s",
        "command": "set -e\necho $((1+1))\n",
        "resources": {"time_limit": "1-00:00:01", "memory": 512},
    }
    serializer = JobSpecSerializer(data=data)
    assert serializer.is_valid(), serializer.errors
    spec = normalise(dict(serializer.validated_data))
    assert spec["command"] == {"script": "set -e\necho $((1+1))\n"}
    assert spec["resources"]["time_limit"] == 1441
    assert "project" not in spec


def test_a_batch_is_created_whole_or_not_at_all(acme, cluster):
    client = acme.client(Role.MEMBER)
    good = minimal(acme.project)
    response = client.post(reverse("job-batch"), {"jobs": [good, {**good, "name": "x y"}, good]})
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]["jobs"]) == {"1"}
    assert Job.objects.count() == 0
    response = client.post(
        reverse("job-batch"), {"jobs": [{**good, "name": f"s{i}"} for i in range(20)]}
    )
    assert response.status_code == 201, response.content
    rows = response.json()["results"]
    assert [row["name"] for row in rows] == [f"s{i}" for i in range(20)]
    assert {row["state"] for row in rows} == {"QUEUED"}
    assert Job.objects.count() == 20


def test_a_batch_respects_quotas_and_access(acme, globex, cluster):
    from apps.quotas.models import Quota

    Quota.objects.create(tenant=acme.tenant, gpus=3)
    rows = (
        acme.client(Role.MEMBER)
        .post(reverse("job-batch"), {"jobs": [minimal(acme.project)] * 5})
        .json()["results"]
    )
    assert [row["state"] for row in rows].count("QUEUED") == 3
    response = globex.client(Role.OWNER).post(
        reverse("job-batch"), {"jobs": [minimal(acme.project)]}
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert (
        acme.client(Role.VIEWER)
        .post(reverse("job-batch"), {"jobs": [minimal(acme.project)]})
        .status_code
        == 403
    )
