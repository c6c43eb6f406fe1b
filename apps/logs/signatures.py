"""Tagging failed attempts with the failure signatures their logs match.

Runs once per failed attempt, after both of its streams are fully shipped: one Elasticsearch
request per attempt (a `filters` aggregation, one filter per signature of the tenant).
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from elasticsearch import ApiError, TransportError

from apps.core.passes import Pass
from apps.jobs.models import AttemptState, JobAttempt
from apps.logs.es import client, index_pattern
from apps.logs.models import FailureSignature, SignatureMatch, SignatureScan

# the scan's failures (apps/core/passes.py), one item per attempt
SCANS = Pass("signatures")
FAILED = [
    AttemptState.FAILED,
    AttemptState.NODE_FAIL,
    AttemptState.TIMEOUT,
    AttemptState.PREEMPTED,
    AttemptState.LOST,
]


def attempts_to_scan(limit: int = 200):
    """Failed attempts of the shipper's window, fully shipped, not scanned yet (an indexed
    query: it runs after every shipper pass)."""
    recent = timezone.now() - timedelta(hours=settings.TORUS_SHIPPER_RECENT_HOURS)
    scanned = SignatureScan.objects.filter(attempt_id=OuterRef("pk"))
    return (
        JobAttempt.objects.filter(state__in=FAILED, logs_shipped=True, created_at__gte=recent)
        .exclude(Exists(scanned))
        .select_related("job__tenant")
        .order_by()[:limit]
    )


def scan_attempt(attempt: JobAttempt) -> list[SignatureMatch]:
    job = attempt.job
    signatures = list(FailureSignature.objects.filter(tenant_id=job.tenant_id))
    matches = []
    if signatures:
        filters = {
            str(sig.pk): {
                "simple_query_string": {
                    "query": sig.query,
                    "fields": ["message"],
                    "default_operator": "and",
                }
            }
            for sig in signatures
        }
        result = client().search(
            index=index_pattern(job.tenant.slug),
            ignore_unavailable=True,
            allow_no_indices=True,
            size=0,
            query={
                "bool": {
                    "filter": [
                        {"term": {"tenant": str(job.tenant_id)}},
                        {"term": {"attempt": str(attempt.pk)}},
                    ]
                }
            },
            aggs={"signatures": {"filters": {"filters": filters}}},
        )
        buckets = result["aggregations"]["signatures"]["buckets"]
        matches = [
            SignatureMatch(
                signature=sig, job=job, attempt=attempt, lines=buckets[str(sig.pk)]["doc_count"]
            )
            for sig in signatures
            if buckets[str(sig.pk)]["doc_count"]
        ]
        SignatureMatch.objects.bulk_create(matches, ignore_conflicts=True)
    SignatureScan.objects.get_or_create(attempt=attempt)
    return matches


def scan_pending() -> int:
    """Scan what is ready; the number of attempts scanned (Elasticsearch down: 0, retried)."""
    scanned = 0
    for attempt in attempts_to_scan():
        key = f"attempt:{attempt.pk}"
        if SCANS.parked(key=key, base_seconds=5.0, max_seconds=600.0):
            continue
        try:
            with transaction.atomic():
                scan_attempt(attempt)
        except (ApiError, TransportError):  # Elasticsearch's trouble: retried, not counted
            return scanned
        except Exception as exc:  # this attempt's: counted, parked, the others scanned
            SCANS.failed(key=key, error=exc)
            continue
        SCANS.succeeded(key=key)
        scanned += 1
    return scanned
