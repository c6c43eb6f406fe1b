"""bench/registry.py's Torus side: the bench tenant's model and the operations on it."""

import json

from _common import ensure_tenant
from _registry_mlflow import ARTIFACT, MODEL, N_METRICS, N_PARAMS, _ok

# -- Torus ------------------------------------------------------------------------------------


def torus_fixture() -> dict:
    """The bench tenant, a project with its storage area, a succeeded job attempt and a
    committed dataset version to point lineage at; the previous run's model removed."""
    from apps.datasets.models import Dataset, DatasetVersion
    from apps.datasets.storage import storage_for
    from apps.datasets.tasks import project_storage_ensure
    from apps.jobs.models import Job, JobAttempt
    from apps.jobs.spec import JobSpecSerializer, normalise
    from apps.registry.models import RegisteredModel, Webhook

    world = ensure_tenant(
        slug="bench-registry",
        project_slug="models",
        owner="bench-registry-owner",
        token_name="bench-registry",
    )
    tenant, project, user = world["tenant"], world["project"], world["user"]
    project_storage_ensure(str(project.pk))
    Webhook.objects.filter(tenant=tenant).delete()
    for old in RegisteredModel.objects.filter(project=project, name=MODEL):
        storage_for("posix").delete(prefix=f"{tenant.slug}/{project.slug}/models/{old.pk}")
        old.delete()
    dataset, _ = Dataset.objects.get_or_create(tenant=tenant, project=project, name="bench-data")
    dv, _ = DatasetVersion.objects.get_or_create(
        dataset=dataset, number=1, defaults={"state": "committed"}
    )
    spec = JobSpecSerializer(
        data={"project": str(project.pk), "name": "bench-train", "command": ["true"]}
    )
    spec.is_valid(raise_exception=True)
    job = Job.objects.create(
        tenant=tenant, project=project, user=user, name="bench-train",
        spec=normalise(dict(spec.validated_data)), state="SUCCEEDED",
    )  # fmt: skip
    attempt = JobAttempt.objects.create(job=job, number=1, state="SUCCEEDED")
    attempt.dataset_versions.add(dv)
    return {**world, "attempt": attempt, "dataset_version": dv}


class TorusOps:
    def __init__(self, url: str, world: dict):
        import httpx

        self.http = httpx.Client(
            base_url=url, timeout=60, headers={"Authorization": f"Bearer {world['token']}"}
        )
        self.world = world
        model = _ok(
            self.http.post(
                "/api/v1/models/", json={"project": str(world["project"].pk), "name": MODEL}
            )
        )
        self.base = f"/api/v1/models/{model['id']}"
        self.requests = {}

    def create_version(self, i: int) -> int:
        body = {
            "metrics": {f"metric_{k}": k + i / 1000 for k in range(N_METRICS)},
            "params": {f"param_{k}": str(k * i) for k in range(N_PARAMS)},
            "dataset_versions": ["bench-data:1"],
            "source_attempt": str(self.world["attempt"].pk),
        }
        # a small version in one request: metadata and the file, stored and committed
        version = _ok(
            self.http.post(
                f"{self.base}/versions/",
                data={"metadata": json.dumps(body)},
                files={"file/model/model.bin": ("model.bin", ARTIFACT)},
            )
        )
        if version["state"] != "ready":
            raise RuntimeError(f"version {version['number']} is {version['state']}")
        self.requests["create_version"] = 1
        return version["number"]

    def move_alias(self, number: int) -> None:
        _ok(self.http.put(f"{self.base}/aliases/production/", json={"version": number}))
        self.requests["move_alias"] = 1

    def list_versions(self) -> int:
        rows = _ok(self.http.get(f"{self.base}/versions/", params={"page_size": 50}))
        self.requests["list_versions"] = 1
        return len(rows["results"])

    def get_model(self) -> None:
        _ok(self.http.get(f"{self.base}/"))
        self.requests["get_model"] = 1

    def read_lineage(self, number: int) -> dict:
        data = _ok(self.http.get(f"{self.base}/versions/{number}/lineage/"))
        self.requests["read_lineage"] = 1
        return {
            "metrics": len(data["metrics"]),
            "params": len(data["params"]),
            "datasets": len(data["dataset_versions"]),
        }
