"""/readyz for the clusters: a check that each controller answers a ping, asked through a worker
(the clusters' credentials, such as the Slurm JWT key, stay out of the web process), and the
background builds not done (scripts/builds), which do not decide readiness."""

from django.conf import settings

from apps.compute.builds import pending_builds
from apps.compute.tasks import ping_clusters
from apps.core.health import check, detail


@check("clusters")
def _clusters() -> None:
    wait = settings.TORUS_READYZ_CELERY_TIMEOUT + 5
    failed = ping_clusters.apply_async(expires=wait).get(timeout=wait)
    # a cluster its build is still bringing up is not there yet (the "builds" entry says so)
    coming = {b.cluster for b in pending_builds() if b.cluster and b.state != "failed"}
    failed = [f for f in failed if f.split(": ", 1)[0] not in coming]
    if failed:
        raise RuntimeError("; ".join(failed))


@detail("builds")
def _builds() -> list[dict]:
    return [build.public() for build in pending_builds()]
