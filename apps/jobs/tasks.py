"""Celery tasks of jobs. Each takes primary keys, reloads, and is safe to run twice."""

import logging

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.db.models import Q

from apps.compute.backends import for_cluster
from apps.compute.backends.base import ClusterUnavailable
from apps.compute.models import Cluster
from apps.compute.selectors import clusters_controlled
from apps.core.passes import Pass, describe
from apps.jobs import dispatch, reconcile
from apps.jobs.admission import admit_tenant
from apps.jobs.estimates import estimates_refresh
from apps.jobs.models import ATTEMPT_ENDED, Job, JobAttempt
from apps.jobs.outputs import model_register
from apps.jobs.states import TERMINAL, State
from apps.jobs.telemetry import pass_timed
from apps.jobs.wake import wanted_key
from apps.tenancy.models import Tenant

logger = logging.getLogger(__name__)
# one cluster whose pass raises (a backend that cannot be built, a row it cannot read) does not
# keep the other clusters from being reconciled and dispatched, nor tenants from admission
CONTROL = Pass("control")
# A succeeded job's metrics come from its log lines: give the shipper this long to finish.
SHIPPED_WAIT_TRIES = 60
SHIPPED_WAIT_SECONDS = 2


class _ClusterLock:
    """One pass of a kind per cluster at a time (a Redis key with a timeout)."""

    def __init__(self, kind: str, cluster_id: str, timeout: int = 120):
        self.key, self.timeout = f"torus:lock:{kind}:{cluster_id}", timeout

    def __enter__(self) -> bool:
        self.held = cache.add(self.key, "1", timeout=self.timeout)
        return self.held

    def __exit__(self, *exc) -> None:
        if self.held:
            cache.delete(self.key)


@shared_task(name="jobs.dispatch_cluster", acks_late=True)
def dispatch_cluster(cluster_id: str) -> int:
    """Dispatch passes of a cluster while requests come in. A request made during a pass is
    served by the pass's holder right after it, not by its own task half a second later: the
    holder lets go of the lock, then looks for a request flag and runs again, so a request
    whose task found the lock held is served by the holder, and one made after the holder
    looked finds the lock free. The passes of one run recover orphans once, first, and share
    the identities they prepare (dispatch.IDENTITY_REUSE_SECONDS)."""
    wanted, total, identities, first = wanted_key(cluster_id), 0, {}, True
    while True:
        with _ClusterLock("dispatch", cluster_id) as held:
            if not held:  # the holder serves this request after its pass
                return total
            cache.delete(wanted)  # what is admitted from now on asks again
            total += dispatch.dispatch_cluster(
                cluster_id=cluster_id, identities=identities, recover=first
            )
            first = False
        if cache.get(wanted) is None:
            return total


@shared_task(name="jobs.reconcile_cluster", acks_late=True)
def reconcile_cluster(cluster_id: str) -> dict:
    with _ClusterLock("reconcile", cluster_id) as held:
        if not held:
            return {}
        return reconcile.reconcile_cluster(cluster_id=cluster_id)


@shared_task(name="jobs.control_pass")
def control_pass() -> None:
    """The periodic backstop: reconcile and dispatch every cluster of this control plane
    (apps/compute/selectors.py), admit every tenant, then predict the waiting jobs' starts."""
    clusters = list(clusters_controlled().values_list("pk", "name"))
    for cluster_id, name in clusters:
        # (no transaction around a pass: each commits its own steps, its claims first)
        failed = _cluster_failed(cluster_id)
        with (
            CONTROL.item(f"reconcile:{name}", on_failure=failed, atomic=False),
            pass_timed(step="reconcile", cluster=name),
        ):
            reconcile_cluster(str(cluster_id))
        with (
            CONTROL.item(f"dispatch:{name}", atomic=False),
            pass_timed(step="dispatch", cluster=name),
        ):
            dispatch_cluster(str(cluster_id))
    # the tenants with jobs waiting for admission on these clusters (or on none yet)
    ours = Q(jobs__cluster_id__in=[pk for pk, _ in clusters])
    if not settings.TORUS_CONTROL_PLANE:
        ours |= Q(jobs__cluster__isnull=True)
    pending = Tenant.objects.filter(ours, jobs__state=State.PENDING).distinct()
    for tenant_id, slug in pending.values_list("pk", "slug"):
        with CONTROL.item(f"admit:{slug}", atomic=False), pass_timed(step="admit"):
            admit_tenant(tenant_id=tenant_id)
    for cluster_id, name in clusters:
        with (
            CONTROL.item(f"estimate:{name}", atomic=False),
            pass_timed(step="estimate", cluster=name),
        ):
            estimates_refresh(cluster_id=cluster_id)


def _cluster_failed(cluster_id):
    """A cluster whose reconcile raised shows it as its health and last_error, as one that
    does not answer does; its attempts are left as they are for the next pass."""

    def mark(error) -> None:
        Cluster.objects.filter(pk=cluster_id).update(
            healthy=False, last_error=f"reconcile failed: {describe(error)}"
        )

    return mark


@shared_task(name="jobs.cancel_backend_jobs", acks_late=True)
def cancel_backend_jobs(job_id: str) -> None:
    job = Job.objects.select_related("cluster").filter(pk=job_id).first()
    if job is None or job.cluster is None or job.state in TERMINAL or not job.cancel_requested:
        return
    backend = for_cluster(job.cluster)
    for attempt in job.attempts.exclude(backend_id="").exclude(state__in=list(ATTEMPT_ENDED)):
        try:
            backend.cancel(attempt.backend_id)
        except ClusterUnavailable as exc:  # the reconciler re-issues it on its next pass
            logger.warning("cancel of %s deferred: %s", attempt.backend_id, exc)


@shared_task(name="jobs.register_model", bind=True, acks_late=True, max_retries=None)
def register_model(self, attempt_id: str) -> str:
    """Sent when a job with `register_model` in its spec succeeds (apps/jobs/outputs.py)."""
    attempt = (
        JobAttempt.objects.select_related("job__project__tenant", "job__user")
        .filter(pk=attempt_id)
        .first()
    )
    if attempt is None:
        return ""
    if not attempt.logs_shipped and self.request.retries < SHIPPED_WAIT_TRIES:
        raise self.retry(countdown=SHIPPED_WAIT_SECONDS)
    version = model_register(attempt=attempt)
    if version is None:
        return ""
    logger.info("job %s registered %s (%s)", attempt.job_id, version, version.state)
    return str(version.pk)


@shared_task(name="jobs.inference_output", acks_late=True)
def inference_output(attempt_id: str) -> str:
    """Sent by the reconciler when an inference job with `output_dataset` succeeds: its
    predictions become a new dataset version (apps/jobs/inference.py). Safe to run twice."""
    from apps.jobs.inference import output_register

    attempt = (
        JobAttempt.objects.select_related("job__project__tenant", "job__user", "job__tenant")
        .filter(pk=attempt_id)
        .first()
    )
    if attempt is None:
        return ""
    version = output_register(attempt=attempt)
    if version is None:
        return ""
    logger.info("job %s wrote %s", attempt.job_id, version)
    return str(version.pk)
