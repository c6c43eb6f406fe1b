"""What a notification says: a subject and a text (e-mail and the chat services), and the JSON
of each channel (a signed webhook gets the items whole). A failed job's item carries the
failure signatures it matched and the last lines of its output, read when the message is
sent (the signatures are scanned after the job ends); a stalled job's its last lines."""

from apps.jobs.models import Job
from apps.logs.models import SignatureMatch
from apps.logs.selectors import read_log_chunk
from apps.notifications.models import Channel, Notification

TAIL_LINES = 20
TAIL_BYTES = 16 * 1024
VERBS = {
    "started": "started",
    "succeeded": "succeeded",
    "failed": "failed",
    "restarting": "is restarting",
    "cancelled": "was cancelled",
    "waiting_too_long": "is waiting longer than expected",
    "stalled": "has stalled",
    "idle": "is idle",
    "deploy_failing": "is failing",
    "deploy_recovered": "has recovered",
}


def tail(job: Job, *, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of the job's latest attempt, stdout then stderr (masked as the
    API masks them)."""
    found: list[str] = []
    for stream in ("stdout", "stderr"):
        end = read_log_chunk(job=job, stream=stream, offset=2**62, limit=1)["next_offset"]
        chunk = read_log_chunk(
            job=job, stream=stream, offset=max(0, end - TAIL_BYTES), limit=TAIL_BYTES
        )
        found += [f"[{stream}] {line}" for line in chunk["data"].splitlines()[-lines:]]
    return found[-lines:]


def enrich(notification: Notification) -> list[dict]:
    """The items, a failed job's with its signatures and last lines."""
    items = []
    for item in notification.items:
        job = None
        if item["event"] in ("failed", "stalled"):
            job = Job.objects.filter(pk=item["job"]).first()
        if job is not None and item["event"] == "failed":
            names = SignatureMatch.objects.filter(job=job).values_list("signature__name", flat=True)
            item = {**item, "signatures": sorted(set(names)), "last_lines": tail(job)}
        elif job is not None:  # stalled: where it stopped
            item = {**item, "last_lines": tail(job)}
        items.append(item)
    return items


def subject(notification: Notification, items: list[dict]) -> str:
    if notification.digest:
        return f"Torus: {len(items)} job events in the last hour"
    first = items[-1]
    what = "deployment" if first.get("deployment") else "job"
    return f"Torus: {what} {first['name']} {VERBS[first['event']]}"


def text(items: list[dict]) -> str:
    parts = []
    for item in items:
        what = (
            f"Deployment {item['name']} ({item['deployment']})"
            if item.get("deployment")
            else (f"Job {item['name']} ({item['job']})")
        )
        line = f"{what} in {item['project']} {VERBS[item['event']]}"
        parts.append(
            line + (f": {item['reason']}" if item.get("reason") else "") + f" at {item['at']}"
        )
        if item.get("signatures"):
            parts.append("Failure signatures: " + ", ".join(item["signatures"]))
        if item.get("last_lines"):
            parts.append("Last lines:\n" + "\n".join(item["last_lines"]))
    return "\n\n".join(parts)


def payload(channel: str, notification: Notification, items: list[dict]) -> dict:
    """The JSON body each webhook channel takes."""
    body = f"{subject(notification, items)}\n\n{text(items)}"
    if channel == Channel.SLACK:
        return {"text": body}
    if channel == Channel.FEISHU:
        return {"msg_type": "text", "content": {"text": body}}
    if channel in (Channel.DINGTALK, Channel.WECOM):
        return {"msgtype": "text", "text": {"content": body}}
    return {
        "id": notification.key,
        "digest": notification.digest,
        "subject": subject(notification, items),
        "items": items,
    }
