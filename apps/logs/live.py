"""Publishing shipped lines to the job's Channels group, in bounded batches."""

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

MAX_LINES_PER_MESSAGE = 500
MAX_CHARS_PER_LINE = 4096


def job_group(job_id) -> str:
    return f"job-{job_id}"


def publish_lines(*, job_id, lines: list[dict]) -> None:
    """Send lines to the job's live viewers: a message per 500 lines, never one per line."""
    layer = get_channel_layer()
    if layer is None or not lines:
        return
    for start in range(0, len(lines), MAX_LINES_PER_MESSAGE):
        chunk = [
            {**line, "message": line["message"][:MAX_CHARS_PER_LINE]}
            for line in lines[start : start + MAX_LINES_PER_MESSAGE]
        ]
        async_to_sync(layer.group_send)(job_group(job_id), {"type": "log.lines", "lines": chunk})


def publish_metrics(*, job_id, points: list) -> None:
    """Send new metric points (JobMetric objects) to the job's live viewers in one message."""
    layer = get_channel_layer()
    if layer is None or not points:
        return
    payload = [{"step": p.step, "name": p.name, "value": p.value} for p in points[:5000]]
    async_to_sync(layer.group_send)(job_group(job_id), {"type": "log.metrics", "points": payload})
