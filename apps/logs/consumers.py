"""/ws/jobs/{id}/?tail=N&stream=stdout|stderr: a job's last N lines (default 200, at most
2000; both streams unless one is named), then its new lines, metrics and state changes.

Authenticated by session or token (see apps/tenancy/websocket_auth.py), authorised per job
at the handshake (another tenant's job: accepted and closed at once, 4404) and for as long as
the socket stays open: a revoked token, a logged-out session or a removed membership closes it
within seconds (4401, 4403; apps/tenancy/consumers.py::AccessWatchMixin). Origin checked by
the ASGI stack. Lines arrive in batches (apps/logs/live.py), never one message per line, and at most
TORUS_LIVE_MAX_LINES_PER_SECOND reach one viewer: beyond that a "skipped" message says how
many lines were left out (they stay in Elasticsearch and the job's logs endpoint).

The backlog: an ended attempt's lines come from its log source, as GET /jobs/{id}/logs/
reads them; a running attempt's from Elasticsearch (apps/logs/backlog.py). A live line the
backlog already held (the same attempt, stream and offset or an earlier one) is not sent.

Messages sent, as JSON objects with a "type":
  backlog   {state, reason, streams: {attempt, stdout, stderr}, lines: [...]}  (first, once)
  lines     {lines: [{attempt_number, stream, offset, timestamp, level, message}, ...]}
  metrics   {points: [{step, name, value}, ...]}
  state     {state, from, reason, at, attempt}
  stream_end {attempt, stream}   (that stream of that attempt is fully shipped)
  skipped   {count, first: {attempt_number, stream, offset}}

/ws/tenants/{id}/jobs/?project=<id>: the state changes of every job of the tenant (or of one
of its projects), for the jobs list; the same handshake checks (job read) and access watch.
  subscribed {tenant, project}   (first, once: changes committed from now on are sent)
  states     {changes: [{job, project, state, from, reason, at, attempt}, ...]}
"""

import time
import uuid
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from apps.core.actor import Actor
from apps.core.db_threads import QueriesInPoolThreads, in_pool_thread
from apps.jobs.models import Job
from apps.logs.backlog import job_backlog
from apps.logs.live import job_group, tenant_jobs_group
from apps.logs.search_backlog import streams_complete
from apps.tenancy.consumers import (
    CLOSE_FORBIDDEN,
    CLOSE_UNAUTHENTICATED,
    AccessWatchMixin,
    refuse,
)
from apps.tenancy.models import Membership, Project
from apps.tenancy.policies import allowed

CLOSE_NOT_FOUND = 4404
DEFAULT_TAIL, MAX_TAIL = 200, 2000
STREAMS = ("stdout", "stderr")


@in_pool_thread
def _visible_job(actor, job_id):
    return Job.objects.visible_to(actor).select_related("tenant").filter(pk=job_id).first()


def _may_follow(actor: Actor, job: Job) -> bool:
    return allowed(actor, resource="job", action="logs", tenant_id=job.tenant_id, target=job)


def _fresh_actor(actor: Actor, tenant_id) -> Actor:
    """The actor with its role in one tenant read afresh (the handshake's may be stale)."""
    role = (
        Membership.objects.filter(user_id=actor.user.pk, tenant_id=tenant_id)
        .values_list("role", flat=True)
        .first()
    )
    return Actor(user=actor.user, roles={tenant_id: role} if role else {}, token=actor.token)


@in_pool_thread
def _still_may_follow(actor: Actor, job: Job) -> bool:
    return _may_follow(_fresh_actor(actor, job.tenant_id), job)


def _may_list_jobs(actor: Actor, tenant_id) -> bool:
    return allowed(actor, resource="job", action="read", tenant_id=tenant_id)


@in_pool_thread
def _still_may_list_jobs(actor: Actor, tenant_id) -> bool:
    return _may_list_jobs(_fresh_actor(actor, tenant_id), tenant_id)


@in_pool_thread
def _project_in(tenant_id, project_id) -> bool:
    return Project.objects.filter(tenant_id=tenant_id, pk=project_id).exists()


def _uuid(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


@in_pool_thread
def _backlog(job, tail: int, stream: str | None) -> tuple[dict, dict]:
    """The backlog message, and the last offset it read per (attempt number, stream)."""
    job.refresh_from_db(fields=["state", "state_reason"])
    streams = streams_complete(job=job)  # before the lines: a stream complete here is in them
    backlog = job_backlog(job=job, count=tail, stream=stream)
    message = {
        "type": "backlog",
        "state": job.state,
        "reason": job.state_reason,
        "streams": streams,
        "lines": backlog.lines,
    }
    return message, backlog.seen


class LineBudget:
    """A token bucket: `rate` lines per second, bursts up to one second's worth."""

    def __init__(self, rate: int):
        self.rate, self.tokens, self.stamp = rate, float(rate), time.monotonic()

    def take(self, wanted: int) -> int:
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        granted = min(wanted, int(self.tokens))
        self.tokens -= granted
        return granted


class GroupSocket(QueriesInPoolThreads, AccessWatchMixin, AsyncJsonWebsocketConsumer):
    """A socket that, once allowed, is accepted (with the "torus" subprotocol when offered),
    joins one Channels group and watches its access; it leaves the group when it closes."""

    async def join(self, group: str) -> None:
        self.group = group
        protocols = self.scope.get("subprotocols") or []
        await self.accept(subprotocol="torus" if "torus" in protocols else None)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.watch_access()

    async def __call__(self, scope, receive, send):
        """However the socket ends, it leaves: a disconnect, or an exception in a handler (a
        send to a client that has already gone raises) that skips `disconnect`. Else its
        recheck task polled the database for ever and the group kept a dead channel: under
        load, with clients timing out, these piled up until the web servers were busy with
        nothing else."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.leave()

    async def disconnect(self, code):
        await self.leave()

    async def leave(self) -> None:
        await self.unwatch_access()
        if group := getattr(self, "group", None):
            self.group = None
            await self.channel_layer.group_discard(group, self.channel_name)


class JobLogConsumer(GroupSocket):
    async def connect(self):
        actor = self.scope.get("actor")
        if actor is None:
            await refuse(self, CLOSE_UNAUTHENTICATED)
            return
        job_id = _uuid(self.scope["url_route"]["kwargs"]["job_id"])
        job = await _visible_job(actor, job_id) if job_id else None
        if job is None:
            await refuse(self, CLOSE_NOT_FOUND)
            return
        if not _may_follow(actor, job):
            await refuse(self, CLOSE_FORBIDDEN)
            return
        self.job = job
        query = parse_qs(self.scope.get("query_string", b"").decode())
        tail = (query.get("tail") or [""])[-1]
        tail = min(int(tail), MAX_TAIL) if tail.isdigit() else DEFAULT_TAIL
        self.stream = (query.get("stream") or [None])[-1]
        if self.stream not in STREAMS:
            self.stream = None  # both
        self.budget = LineBudget(settings.TORUS_LIVE_MAX_LINES_PER_SECOND)
        # subscribe first, then read: whatever is shipped meanwhile comes live, never not at
        # all; a live line the backlog held is dropped (`seen`), so none shows twice
        self.seen: dict[tuple[int, str], int] = {}
        await self.join(job_group(job.pk))
        message, self.seen = await _backlog(job, tail, self.stream)
        await self.send_json(message)

    async def still_allowed(self) -> bool:
        return await _still_may_follow(self.scope["actor"], self.job)

    async def log_lines(self, event):
        lines = [line for line in event["lines"] if self._new(line)]
        granted = self.budget.take(len(lines))
        if granted:
            await self.send_json({"type": "lines", "lines": lines[:granted]})
        if granted < len(lines):
            first = lines[granted]
            await self.send_json(
                {
                    "type": "skipped",
                    "count": len(lines) - granted,
                    "first": {k: first[k] for k in ("attempt_number", "stream", "offset")},
                }
            )

    def _new(self, line: dict) -> bool:
        """Of this viewer's stream(s), and past what it has (the backlog, earlier batches)."""
        if self.stream and line.get("stream") != self.stream:
            return False
        offset = line.get("offset")
        if offset is None:  # not a shipped line (nothing to compare): shown
            return True
        key = (line.get("attempt_number"), line.get("stream"))
        if offset <= self.seen.get(key, -1):
            return False
        self.seen[key] = offset
        return True

    async def log_metrics(self, event):
        await self.send_json({"type": "metrics", "points": event["points"]})

    async def log_stream_end(self, event):
        await self.send_json(
            {"type": "stream_end", "attempt": event["attempt"], "stream": event["stream"]}
        )

    async def job_state(self, event):
        await self.send_json({**event, "type": "state"})


class TenantJobsConsumer(GroupSocket):
    """A jobs list's live states: every change of the tenant's jobs (one project's, with
    ?project=), in the batches apps/logs/live.py::publish_states makes."""

    async def connect(self):
        actor = self.scope.get("actor")
        if actor is None:
            await refuse(self, CLOSE_UNAUTHENTICATED)
            return
        tenant_id = _uuid(self.scope["url_route"]["kwargs"]["tenant_id"])
        if tenant_id not in actor.tenant_ids:  # not one of the actor's: as if it did not exist
            await refuse(self, CLOSE_NOT_FOUND)
            return
        if not _may_list_jobs(actor, tenant_id):
            await refuse(self, CLOSE_FORBIDDEN)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        project = (query.get("project") or [""])[-1]
        self.project = None
        if project:
            self.project = _uuid(project)
            if self.project is None or not await _project_in(tenant_id, self.project):
                await refuse(self, CLOSE_NOT_FOUND)
                return
        self.tenant_id = tenant_id
        await self.join(tenant_jobs_group(tenant_id))
        await self.send_json(
            {
                "type": "subscribed",
                "tenant": str(tenant_id),
                "project": str(self.project) if self.project else None,
            }
        )

    async def still_allowed(self) -> bool:
        return await _still_may_list_jobs(self.scope["actor"], self.tenant_id)

    async def jobs_states(self, event):
        changes = event["changes"]
        if self.project:
            project = str(self.project)
            changes = [change for change in changes if change["project"] == project]
        if changes:
            await self.send_json({"type": "states", "changes": changes})
