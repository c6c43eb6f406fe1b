"""The jobs' calls of torus.Client: submit, list, wait, cancel, restart, logs (a page, live,
followed to the end), log search and metrics. A mixin: the transport is the Client's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import quote, urlencode

from torus.errors import TorusError
from torus.live import TERMINAL, Follower, messages


class JobCalls:
    """Calls on /api/v1/jobs/ and the log search; `request`, `paginate`, `url` and `_token`
    are the Client's (torus/client.py)."""

    def submit(self, spec: dict) -> dict:
        """Submit a job spec (see docs/jobs.md); returns the job with its state."""
        return self.request("POST", "/api/v1/jobs/", json=spec)

    def jobs(self, *, state=None, project=None, user=None, label=None, limit=200) -> list[dict]:
        rows = []
        params = {"state": state, "project": project, "user": user, "label": label}
        for row in self.paginate("/api/v1/jobs/", **params):
            rows.append(row)
            if len(rows) >= limit:
                break
        return rows

    def job(self, job_id: str) -> dict:
        return self.request("GET", f"/api/v1/jobs/{job_id}/")

    def cancel(self, job_id: str) -> dict:
        return self.request("POST", f"/api/v1/jobs/{job_id}/cancel/")

    def restart(self, job_id: str) -> dict:
        return self.request("POST", f"/api/v1/jobs/{job_id}/restart/")

    def wait(
        self, job_id: str, *, timeout: float | None = None, poll: float = 1.0, on_change=None
    ) -> dict:
        """Poll until the job ends; `on_change(job)` is called whenever state or reason moves."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = None
        while True:
            job = self.job(job_id)
            key = (job["state"], job["state_reason"])
            if key != seen and on_change:
                on_change(job)
            seen = key
            if job["state"] in TERMINAL:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TorusError(f"timed out waiting for job {job_id} ({job['state']})")
            time.sleep(poll)

    def logs(
        self,
        job_id: str,
        *,
        attempt: int | None = None,
        stream: str = "stdout",
        offset: int = 0,
        limit: int = 65536,
    ) -> dict:
        params = {"stream": stream, "offset": offset, "limit": limit}
        if attempt:
            params["attempt"] = attempt
        return self.request("GET", f"/api/v1/jobs/{job_id}/logs/", params=params)

    def live(
        self,
        job_id: str,
        *,
        tail: int = 200,
        stream: str | None = None,
        heartbeat: float | None = None,
    ):
        """The job's live messages (see apps/logs/consumers.py): a backlog of its last `tail`
        lines first, then batches of new lines, metric points, state changes, stream ends.
        `stream`: only stdout's or stderr's lines (default both)."""
        self.job(job_id)  # a clear 404 or 401 first: a refused handshake cannot say why
        query = urlencode({"tail": int(tail), **({"stream": stream} if stream else {})})
        path = f"/ws/jobs/{quote(job_id, safe='')}/?{query}"
        return messages(self.url, path, token=self._token, heartbeat=heartbeat)

    def follow_logs(
        self,
        job_id: str,
        *,
        streams: tuple[str, ...] = ("stdout",),
        tail: int = 200,
        on_message=None,
        end_timeout: float = 60.0,
    ) -> Iterator[dict]:
        """Yield the job's lines ({attempt_number, stream, offset, timestamp, level, message})
        as they are shipped, its last `tail` lines first, until the job has ended and its
        output is fully shipped. `on_message(message)` sees every message (states, skips).
        Raises TorusError when the last lines of an ended job take over `end_timeout` s."""
        follower = Follower(streams=set(streams))
        ended_at = None
        only = streams[0] if len(streams) == 1 else None
        for message in self.live(job_id, tail=tail, stream=only, heartbeat=1.0):
            if on_message is not None and message["type"] != "idle":
                on_message(message)
            yield from follower.feed(message)
            if follower.done:
                return
            if follower.state in TERMINAL:
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at > end_timeout:
                    raise TorusError(
                        f"job {job_id} has ended but its last lines were not shipped within "
                        f"{end_timeout:.0f} s (is the log shipper running?)"
                    )
        raise TorusError("the live view closed before the job ended")

    def search_logs(
        self,
        query: str = "",
        *,
        project: str | None = None,
        job: str | None = None,
        size: int = 50,
        **filters,
    ) -> dict:
        """Full-text search over the log lines of your tenants' jobs (newest first)."""
        params = {"q": query, "size": size, "project": project, "job": job, **filters}
        return self.request(
            "GET",
            "/api/v1/logs/search/",
            params={k: v for k, v in params.items() if v not in (None, "")},
        )

    def metrics(self, job_id: str, *, names: list[str] | None = None) -> dict:
        params = {"metric": ",".join(names)} if names else None
        return self.request("GET", f"/api/v1/jobs/{job_id}/metrics/", params=params)["series"]
