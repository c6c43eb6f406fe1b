"""The jobs' series for /metrics (apps/core/telemetry.py): queue depth and waits per tenant,
cluster and partition, dispatch latency, ends, admission decisions, restarts by cause and
the control passes' time. Read from the jobs' tables at scrape time, or recorded as they
happen (decisions, restarts, pass time)."""

import time
from contextlib import contextmanager

from django.db.models import ExpressionWrapper, F, FloatField
from django.db.models.functions import Extract, Greatest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from apps.core import telemetry
from apps.jobs.models import Job, JobAttempt, JobEvent
from apps.jobs.states import TERMINAL, State

WAITING = (State.PENDING, State.QUEUED, State.SUBMITTED, State.RESTARTING)

ADMISSION = telemetry.counter(
    "torus_admission_decisions",
    "Admission's decisions: admitted, borrowed (admitted on idle GPUs past the tenant's GPU"
    " quota) and held (a job given a new reason to wait)",
    labels=("tenant", "decision"),
)
RESTARTS = telemetry.counter(
    "torus_job_restarts",
    "Attempts restarted, by cause: node_failure, preemption or exit_code (the spec's list)",
    labels=("cause",),
)
PASS_SECONDS = telemetry.histogram(
    "torus_pass_seconds",
    "Time of each control pass step: reconcile and dispatch per cluster, admission",
    labels=("step", "cluster"),
)


def decided(*, tenant: str, decision: str, count: int = 1) -> None:
    telemetry.add(ADMISSION, count, tenant=tenant, decision=decision)


def restarted(*, cause: str) -> None:
    telemetry.add(RESTARTS, cause=cause)


@contextmanager
def pass_timed(*, step: str, cluster: str = ""):
    started = time.perf_counter()
    try:
        yield
    finally:
        telemetry.observe(PASS_SECONDS, time.perf_counter() - started, step=step, cluster=cluster)


def _seconds(later: str, earlier) -> ExpressionWrapper:
    return ExpressionWrapper(
        Extract(F(later) - earlier, "epoch"),
        output_field=FloatField(),
    )


@telemetry.collector("jobs")
def collect():
    place = {"tenant": "tenant__slug", "cluster": "cluster__name", "partition": "partition"}
    yield telemetry.counts_from_rows(
        GaugeMetricFamily(
            "torus_jobs_waiting",
            "Jobs not yet running: PENDING (admission), QUEUED (dispatch), SUBMITTED (the"
            " cluster's queue), RESTARTING",
            labels=[*place, "state"],
        ),
        queryset=Job.objects.filter(state__in=WAITING),
        labels={**place, "state": "state"},
    )
    yield telemetry.counts_from_rows(
        GaugeMetricFamily("torus_jobs_running", "Jobs running", labels=list(place)),
        queryset=Job.objects.filter(state=State.RUNNING),
        labels=place,
    )
    yield telemetry.histogram_from_rows(
        "torus_job_wait_seconds",
        "From submission to the first start, of every job that started",
        queryset=Job.objects.filter(started_at__isnull=False),
        seconds=_seconds("started_at", F("created_at")),
        labels=place,
    )
    yield telemetry.histogram_from_rows(
        "torus_dispatch_latency_seconds",
        "From an attempt's admission (or the end of its restart backoff) to the cluster's"
        " acceptance",
        queryset=JobAttempt.objects.filter(submitted_at__isnull=False),
        seconds=_seconds("submitted_at", Greatest(F("created_at"), F("not_before"))),
        labels={"cluster": "job__cluster__name"},
    )
    yield telemetry.counts_from_rows(
        CounterMetricFamily(
            "torus_job_ends", "Jobs that ended, by state", labels=["tenant", "state"]
        ),
        queryset=JobEvent.objects.filter(to_state__in=TERMINAL),
        labels={"tenant": "job__tenant__slug", "state": "to_state"},
    )
