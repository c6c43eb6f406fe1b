"""Reads for jobs beyond plain querysets: attempt output files."""

from django.core.exceptions import ValidationError

from apps.compute.backends.base import ClusterUnavailable
from apps.jobs.models import ATTEMPT_ENDED, Job


def read_log_chunk(*, job: Job, stream: str, offset: int, limit: int, attempt: int | None = None):
    """Bytes [offset, offset+limit) of an attempt's stdout or stderr, decoded leniently, read
    through its cluster's log source. The path comes from the attempt row, never the request."""
    attempts = job.attempts.order_by("-number")
    row = attempts.filter(number=attempt).first() if attempt else attempts.first()
    if attempt and row is None:
        raise ValidationError({"attempt": [f"This job has no attempt {attempt}."]})
    empty = {
        "attempt": row.number if row else None,
        "stream": stream,
        "offset": offset,
        "next_offset": offset,
        "data": "",
        "complete": row is None,
    }
    if row is None:
        return empty
    from apps.logs.sources import log_ref, source_for  # logs reads jobs' models
    from apps.secrets.mask import masker_for, read_masked

    ref = log_ref(attempt=row, stream=stream)
    source = source_for(attempt=row)
    masker = masker_for(row)  # the job's secrets, overwritten with '*' (offsets stay true)
    try:
        size = source.size(ref=ref)
        data = (
            read_masked(
                lambda at, n: source.read(ref=ref, offset=at, limit=n),
                offset=min(offset, size),
                limit=limit,
                masker=masker,
            )
            if size
            else b""
        )
    except ClusterUnavailable:
        size = None
    if size is None or data is None:
        return {**empty, "complete": row.state in ATTEMPT_ENDED}
    # Never cut a UTF-8 character in two: stop before an incomplete trailing sequence.
    cut = len(data)
    if cut == limit:
        while cut > 0 and (data[cut - 1] & 0xC0) == 0x80:
            cut -= 1
        if cut > 0 and data[cut - 1] >= 0xC0:
            cut -= 1
        cut = cut or len(data)
    data = data[:cut]
    next_offset = min(offset, size) + len(data)
    return {
        "attempt": row.number,
        "stream": stream,
        "offset": offset,
        "next_offset": next_offset,
        "data": data.decode("utf-8", errors="replace"),
        "complete": row.state in ATTEMPT_ENDED and next_offset >= size,
    }


def node_cache_summary(*, actor, node: str | None = None) -> list[dict]:
    """Dataset cache figures per node (apps/jobs/staging.py) over the attempts of the jobs
    the actor can see: files found in the cache, files staged, bytes staged and evicted."""
    from django.db.models import Count, F, Sum

    from apps.jobs.models import DatasetStage

    stages = DatasetStage.objects.visible_to(actor)
    if node:
        stages = stages.filter(node=node)
    return list(
        stages.values("node", cluster=F("attempt__job__cluster__name"))
        .annotate(
            attempts=Count("attempt", distinct=True),
            hits=Sum("hits"),
            misses=Sum("misses"),
            bytes_staged=Sum("bytes_staged"),
            bytes_hit=Sum("bytes_hit"),
            evicted_bytes=Sum("evicted_bytes"),
        )
        .order_by("cluster", "node")
    )
