"""SQL statements per registry request (bench/registry.py's operations), with the token
already resolved by this process (apps/tenancy/token_cache.py): baselines that only a
regression moves. They do not depend on how many versions, aliases or datasets there are."""

import pytest
from django.db import connection

from apps.jobs.attempts import attempt_open
from apps.tenancy.models import Role
from tests.factories import make_job
from tests.registry.test_api import create_model, models_url, upload_version
from tests.registry.test_lineage import dataset_version


def statements(client, method: str, url: str, **kwargs) -> tuple[int, dict]:
    """SQL statements of one request (a transaction's BEGIN and COMMIT, or the savepoint
    that stands for them inside the test's transaction, are not counted)."""
    sql = []

    def count(execute, query, params, many, context):
        if not query.startswith(("SAVEPOINT", "RELEASE SAVEPOINT")):
            sql.append(query)
        return execute(query, params, many, context)

    with connection.execute_wrapper(count):
        response = getattr(client, method)(url, **kwargs)
    assert response.status_code == 200, response.content
    return len(sql), response.json()


@pytest.mark.django_db
@pytest.mark.parametrize("versions", [2, 6])
def test_registry_reads_cost_a_fixed_number_of_statements(acme, models_area, versions):
    data = dataset_version(acme)
    job = make_job(
        project=acme.project, user=acme.users[Role.MEMBER], state="SUCCEEDED", gpus_per_node=0
    )
    attempt_open(job=job)
    source = attempt_open(job=job)
    source.dataset_versions.add(data)
    client = acme.client(Role.MEMBER)
    model = create_model(client, acme.project)
    for i in range(versions):
        upload_version(
            client,
            model["id"],
            {"w": bytes([i])},
            source_attempt=str(source.pk),
            dataset_versions=["imagenet:1"],
            metrics={"acc": i / 10},
        )
    for alias in ("production", "staging"):
        url = models_url(model["id"], "aliases", alias)
        client.put(url, {"version": 1}, format="json")
    client.get(models_url(model["id"]))  # the token is resolved and cached

    count, body = statements(client, "get", models_url(model["id"]))
    assert count == 1  # the model with its aliases
    assert body["aliases"] == {"production": 1, "staging": 1}

    count, body = statements(client, "get", models_url(model["id"], "versions"))
    assert count == 2  # the model, then the page with each version's aliases and datasets
    rows = body["results"]
    assert [r["number"] for r in rows] == list(range(versions, 0, -1))
    assert rows[-1]["aliases"] == ["production", "staging"]
    assert all(r["dataset_versions"] == [str(data.pk)] for r in rows)

    count, body = statements(client, "get", models_url(model["id"], "versions", 1, "lineage"))
    # the model, the version (with whether an inference job read it: none here), the job's
    # attempts (with the job and what each read), the dataset versions
    assert count == 4
    assert [a["source"] for a in body["attempts"]] == [False, True]
    assert body["attempts"][1]["dataset_versions"] == [str(data.pk)]
    assert [d["ref"] for d in body["dataset_versions"]] == ["imagenet:1"]

    # an admin (a member's rights in the project are looked up: one query per check)
    url = models_url(model["id"], "aliases", "production")
    admin = acme.client(Role.ADMIN)
    admin.get(models_url(model["id"]))
    count, body = statements(admin, "put", url, data={"version": 2}, format="json")
    # the model (with whether its tenant has webhooks: none here), the version, and one
    # statement: the alias locked and moved, the audit row written
    assert count == 3
    assert body["version"] == 2
