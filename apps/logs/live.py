"""Publishing to a job's Channels group (`job-<id>`): shipped lines and metric points in
bounded batches, and job state changes; the state changes also go to the tenant's jobs group
(`jobs-<tenant id>`, the jobs list's /ws/tenants/{id}/jobs/), a message per commit and tenant
of up to 500 changes. Best effort: the data itself is in Elasticsearch and
PostgreSQL, so a Redis outage is logged and never fails the caller."""

import asyncio
import logging
import os
import threading

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)
MAX_LINES_PER_MESSAGE = 500
MAX_CHARS_PER_LINE = 4096
MAX_POINTS_PER_MESSAGE = 5000
MAX_CHANGES_PER_MESSAGE = 500


def job_group(job_id) -> str:
    return f"job-{job_id}"


def tenant_jobs_group(tenant_id) -> str:
    return f"jobs-{tenant_id}"


_publisher: dict = {}  # this process's event loop for publishing, and its pid
_publisher_lock = threading.Lock()


def _publisher_loop() -> asyncio.AbstractEventLoop:
    """One event loop per process, in a daemon thread, kept for every publish: its Redis
    connections stay open (async_to_sync made a new loop, and connection, per call)."""
    with _publisher_lock:
        if _publisher.get("pid") != os.getpid():  # first use, or a forked child
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="live-publish", daemon=True).start()
            _publisher.update(pid=os.getpid(), loop=loop)
        return _publisher["loop"]


async def _groups_with_members(layer, groups: list[str]) -> list[str]:
    """The groups someone is in: one pipelined ZCARD per Redis host. channels_redis's
    group_send costs two round trips even for an empty group, and a dispatch pass moves
    hundreds of jobs that nobody watches. Another layer (in memory): every group."""
    if not hasattr(layer, "_group_key"):
        return groups
    by_host: dict[int, list[str]] = {}
    for group in groups:
        by_host.setdefault(layer.consistent_hash(group), []).append(group)
    watched = []
    for index, names in by_host.items():
        pipe = layer.connection(index).pipeline(transaction=False)
        for group in names:
            pipe.zcard(layer._group_key(group))
        counts = await pipe.execute()
        watched += [group for group, count in zip(names, counts, strict=True) if count]
    return watched


def _send(messages: list[tuple[str, dict]]) -> None:
    """group_send every (group, message) in one trip through the publishing loop: groups in
    parallel, each group's messages in order."""
    layer = get_channel_layer()
    if layer is None or not messages:
        return

    by_group: dict[str, list[dict]] = {}
    for group, message in messages:
        by_group.setdefault(group, []).append(message)

    async def send_in_order(group: str, batch: list[dict]):
        for message in batch:  # a group's messages arrive in the order they were made
            await layer.group_send(group, message)

    async def send_all():
        watched = await _groups_with_members(layer, list(by_group))
        await asyncio.gather(*(send_in_order(g, by_group[g]) for g in watched))

    try:
        asyncio.run_coroutine_threadsafe(send_all(), _publisher_loop()).result(timeout=10)
    except Exception as exc:  # a Redis outage must not stop the caller
        logger.warning("live publish to %d group(s) failed: %s", len(messages), exc)


def publish(*, messages: list[tuple[str, dict]]) -> None:
    """(group, message) pairs of an app above logs (the notifications' bell), sent as the
    logs' own: one trip through the publishing loop, groups without members skipped."""
    _send(messages)


def publish_lines(*, job_id, lines: list[dict]) -> None:
    """Send lines to the job's live viewers: a message per 500 lines, never one per line."""
    group = job_group(job_id)
    _send(
        [
            (
                group,
                {
                    "type": "log.lines",
                    "lines": [
                        {**line, "message": line["message"][:MAX_CHARS_PER_LINE]}
                        for line in lines[start : start + MAX_LINES_PER_MESSAGE]
                    ],
                },
            )
            for start in range(0, len(lines), MAX_LINES_PER_MESSAGE)
        ]
    )


def publish_metrics(*, job_id, points: list) -> None:
    """Send new metric points (JobMetric objects) to the job's live viewers in one message."""
    if not points:
        return
    payload = [
        {"step": p.step, "name": p.name, "value": p.value} for p in points[:MAX_POINTS_PER_MESSAGE]
    ]
    _send([(job_group(job_id), {"type": "log.metrics", "points": payload})])


def publish_stream_end(*, job_id, attempt_number: int, stream: str) -> None:
    """Tell the job's live viewers that a stream of an attempt has been shipped to its end."""
    message = {"type": "log.stream_end", "attempt": attempt_number, "stream": stream}
    _send([(job_group(job_id), message)])


def _state_change(event) -> dict:
    return {
        "state": event.to_state,
        "from": event.from_state,
        "reason": event.reason,
        "at": event.created_at.isoformat(),
        "attempt": event.attempt.number if event.attempt_id else None,
    }


def publish_states(*, events: list) -> None:
    """Send job state changes (saved JobEvent objects, their job attached) to each job's live
    viewers, and in batches to the live jobs lists of each job's tenant."""
    messages, by_tenant = [], {}
    for event in events:
        change = _state_change(event)
        messages.append((job_group(event.job_id), {"type": "job.state", **change}))
        job = event.job
        by_tenant.setdefault(job.tenant_id, []).append(
            {"job": str(job.pk), "project": str(job.project_id), **change}
        )
    step = MAX_CHANGES_PER_MESSAGE
    for tenant_id, changes in by_tenant.items():
        group = tenant_jobs_group(tenant_id)
        messages.extend(
            (group, {"type": "jobs.states", "changes": changes[i : i + step]})
            for i in range(0, len(changes), step)
        )
    _send(messages)
