"""The deployments pages end to end in headless Chromium (frontend/e2e/run.mjs, scenario
`deployments`) against the real backend: the tiny Llama GGUF registered as `tiny@production`
(tests/serving/conftest.py), the jobs' control loop and the deployments' reconciler in the
background, real Slurm and llama-server, the gateway in the same ASGI app. A member deploys
from the form (the fit estimate first), sees it READY with its replica and the replica's job,
makes a key and sends requests with it through the gateway from the page, and sees the
request-rate chart; the pages in English and Chinese pass axe; a viewer sees no action."""

import pytest

from apps.jobs.models import Kind
from apps.serving.keys import token_hash
from apps.serving.models import Deployment, DeploymentKey, ServingRequest
from apps.tenancy.models import Role
from tests.e2e.conftest import run_browser, with_password
from tests.serving.conftest import (  # noqa: F401  (fixtures)
    gguf_version,
    serving_area,
    serving_loop,
    tiny_gguf,
)

pytestmark = pytest.mark.django_db(transaction=True)

REQUESTS = 5


def test_member_deploys_from_the_form_and_sees_traffic_viewer_sees_no_action(
    built_ui,
    asgi_server,
    acme,
    gguf_version,  # noqa: F811
    serving_loop,  # noqa: F811
):
    seen = run_browser(
        "deployments",
        {
            "base": asgi_server.url,
            "project": acme.project.slug,
            "model": gguf_version.model.name,
            "name": "tiny-ui",
            "requests": REQUESTS,
            "users": {
                role.value: with_password(acme.users[role]) for role in (Role.MEMBER, Role.VIEWER)
            },
        },
        timeout=600,
    )
    deployment = Deployment.objects.get(pk=seen["deploymentId"])
    assert (deployment.name, deployment.project_id) == ("tiny-ui", acme.project.pk)
    assert deployment.created_by == acme.users[Role.MEMBER]
    assert (deployment.ref, deployment.follow_alias) == ("tiny@production", "production")
    assert (deployment.slots, deployment.context) == (2, 512)
    assert Deployment.objects.filter(project=acme.project).count() == 1
    # READY with its replica, whose job the page linked to
    assert "1 / 1" in seen["replicas"]
    replica = deployment.replicas.get(job_id=seen["replicaJob"])
    assert replica.job.kind == Kind.SERVE and replica.job.user == acme.users[Role.MEMBER]
    assert "replica_ready" in seen["events"]
    # the key shown once is the one kept (as its hash), and the gateway took it
    key = DeploymentKey.objects.get(deployment=deployment)
    assert (key.name, key.revoked_at) == ("e2e", None)
    assert seen["key"].startswith(key.prefix) and token_hash(seen["key"]) == key.token_hash
    assert seen["statuses"] == [200] * REQUESTS
    served = ServingRequest.objects.filter(deployment=deployment, key=key, status=200)
    assert served.count() == REQUESTS
    assert all(r.tokens_out > 0 for r in served)
    pages = set(seen["pages"])
    for name in ("deployments", "deployment", "deployment-traffic", "deploy"):
        assert {f"{name}.en", f"{name}.zh"} <= pages
    assert {"deployment-keys.en", "deployment-events.en", "deployment-viewer.en"} <= pages
    assert seen["viewerOk"]
    # the form showed the deploy's own fit check before the deploy (a dry run wrote nothing)
    assert seen["fits"] == "true", seen.get("fitText")
    assert "Fits" in seen["fitText"]
