"""/ws/jobs/{id}/: the last lines of a job, then its new lines as they are shipped.

Authenticated by session or token (see apps/tenancy/websocket_auth.py), authorised per job
at the handshake (another tenant's job is refused before accept), Origin checked by the ASGI
stack. Lines arrive in batches (apps/logs/live.py), never one message per line.
"""

import uuid
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.jobs.models import Job
from apps.logs.live import job_group
from apps.logs.search_backlog import last_lines
from apps.tenancy.consumers import CLOSE_UNAUTHENTICATED

CLOSE_NOT_FOUND = 4404
DEFAULT_TAIL, MAX_TAIL = 200, 2000


@database_sync_to_async
def _visible_job(actor, job_id):
    job = Job.objects.visible_to(actor).select_related("tenant").filter(pk=job_id).first()
    return job


class JobLogConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        actor = self.scope.get("actor")
        if actor is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        try:
            job_id = uuid.UUID(self.scope["url_route"]["kwargs"]["job_id"])
        except ValueError:
            job = None
        else:
            job = await _visible_job(actor, job_id)
        if job is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = job_group(job.pk)
        protocols = self.scope.get("subprotocols") or []
        await self.accept(subprotocol="torus" if "torus" in protocols else None)
        await self.channel_layer.group_add(self.group, self.channel_name)
        tail = min(int(self._query().get("tail", DEFAULT_TAIL) or DEFAULT_TAIL), MAX_TAIL)
        lines = await database_sync_to_async(last_lines)(job=job, count=tail)
        await self.send_json({"type": "backlog", "state": job.state, "lines": lines})

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def log_lines(self, event):
        await self.send_json({"type": "lines", "lines": event["lines"]})

    async def log_metrics(self, event):
        await self.send_json({"type": "metrics", "points": event["points"]})

    def _query(self) -> dict:
        raw = self.scope.get("query_string", b"").decode()
        return {key: values[-1] for key, values in parse_qs(raw).items()}
