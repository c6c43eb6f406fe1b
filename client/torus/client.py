"""torus.Client: a thin, typed wrapper over the REST API."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import httpx

from torus.config import load_settings
from torus.errors import TorusError
from torus.job_calls import JobCalls


class Client(JobCalls):
    """client = torus.Client()  # URL and token from the environment or the config file
    (its default profile, or `profile=`)"""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        profile: str | None = None,
        timeout: float = 30,
    ):
        settings = load_settings(url=url, token=token, profile=profile)
        headers = {"Accept": "application/json", "User-Agent": "torus-sdk"}
        if settings.token:
            headers["Authorization"] = f"Bearer {settings.token}"
        self.url, self._token = settings.url, settings.token
        self._http = httpx.Client(base_url=settings.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------

    def request(
        self, method: str, path: str, *, json: Any = None, params=None, content=None
    ) -> Any:
        """One call; `content` (bytes) is sent raw as application/octet-stream."""
        headers = {"Content-Type": "application/octet-stream"} if content is not None else None
        try:
            response = self._http.request(
                method, path, json=json, params=params, content=content, headers=headers
            )
        except httpx.HTTPError as exc:
            raise TorusError(f"cannot reach Torus at {self.url}: {exc}") from exc
        if response.status_code == 204:
            return None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_error:
            error = (body or {}).get("error", {}) if isinstance(body, dict) else {}
            raise TorusError(
                error.get("message") or f"HTTP {response.status_code}",
                status=response.status_code,
                code=error.get("code", "error"),
                fields=error.get("fields"),
            )
        return body

    def post_multipart(self, path: str, *, data: dict, files: dict) -> Any:
        """POST a multipart/form-data body (small uploads in one request)."""
        try:
            response = self._http.post(path, data=data, files=files)
        except httpx.HTTPError as exc:
            raise TorusError(f"cannot reach Torus at {self.url}: {exc}") from exc
        if response.is_error:
            self._raise(response)
        return response.json()

    def download(self, path: str, dest, *, params=None, on_progress=None) -> int:
        """Stream a GET into the binary file `dest`; `on_progress(done, total)` after each
        chunk (total: the Content-Length, or None). Returns the bytes written."""
        try:
            with self._http.stream("GET", path, params=params, follow_redirects=True) as response:
                if response.is_error:
                    response.read()
                    self._raise(response)
                total = response.headers.get("Content-Length")
                total = int(total) if total and total.isdigit() else None
                done = 0
                for chunk in response.iter_bytes(1024 * 1024):
                    dest.write(chunk)
                    done += len(chunk)
                    if on_progress:
                        on_progress(done, total)
                return done
        except httpx.HTTPError as exc:
            raise TorusError(f"cannot reach Torus at {self.url}: {exc}") from exc

    def _raise(self, response) -> None:
        raise api_error(response)

    @contextlib.contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        params=None,
        content=None,
        headers=None,
        follow_redirects: bool = False,
    ):
        """A streamed call (large uploads and downloads): yields the open response once its
        status is known to be a success; an API error is raised as TorusError. `content` may
        be an iterator of bytes: give its Content-Length in `headers`. `follow_redirects`:
        e.g. to a presigned URL of the object store (the token is not sent there: httpx drops
        Authorization on a redirect to another origin)."""
        try:
            with self._http.stream(
                method,
                path,
                params=params,
                content=content,
                headers=headers,
                follow_redirects=follow_redirects,
            ) as response:
                if response.is_error:
                    response.read()
                    raise api_error(response)
                yield response
        except httpx.HTTPError as exc:
            raise TorusError(f"cannot reach Torus at {self.url}: {exc}") from exc

    def paginate(self, path: str, **params) -> Iterator[dict]:
        """Every row of a list endpoint, following the cursor."""
        page = self.request("GET", path, params={k: v for k, v in params.items() if v is not None})
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.request("GET", page["next"])

    # -- resources ---------------------------------------------------------------------

    def me(self) -> dict:
        return self.request("GET", "/api/v1/auth/me")

    def projects(self, *, tenant: str | None = None, archived: bool = False) -> list[dict]:
        """Your projects; `archived=True`: only the archived ones (hidden by default)."""
        return list(self.paginate("/api/v1/projects/", tenant=tenant, **_archived(archived)))

    def datasets(self, *, project: str | None = None, archived: bool = False) -> list[dict]:
        return self._listed("dataset", project, archived)

    def models(self, *, project: str | None = None, archived: bool = False) -> list[dict]:
        return self._listed("model", project, archived)

    def deployments(self, *, project: str | None = None, archived: bool = False) -> list[dict]:
        return self._listed("deployment", project, archived)

    def _listed(self, kind: str, project: str | None, archived: bool) -> list[dict]:
        project = self.project_id(project) if project else None
        return list(self.paginate(_collection(kind), project=project, **_archived(archived)))

    def create_project(self, *, name: str, slug: str, description: str = "", tenant=None) -> dict:
        body = {"name": name, "slug": slug, "description": description}
        if tenant:
            body["tenant"] = tenant
        return self.request("POST", "/api/v1/projects/", json=body)

    def project_id(self, project: str, *, archived: bool = False) -> str:
        """A project's id from its id or its slug (a slug must name one project you can see;
        `archived=True`: one of the archived projects, which lists hide by default)."""
        if _is_id(project):
            return project
        params = {"slug": project, **_archived(archived)}
        matches = self.request("GET", "/api/v1/projects/", params=params)["results"]
        if len(matches) != 1:
            where = "archived project" if archived else "project"
            raise TorusError(f"no single {where} with slug {project!r} ({len(matches)} found)")
        return matches[0]["id"]

    def find(
        self,
        kind: str,
        ref: str,
        *,
        project: str | None = None,
        archived: bool = False,
    ) -> dict | None:
        """A project (by id or slug), dataset, model or deployment (by id or name, in
        `project` when names repeat across projects); None when there is none.
        `archived=True`: among the archived ones."""
        if _is_id(ref):
            return self.request("GET", f"{_collection(kind)}{ref}/")
        params = {"slug" if kind == "project" else "name": ref, **_archived(archived)}
        if project and kind != "project":
            params["project"] = self.project_id(project)
        rows = self.request("GET", _collection(kind), params=params)["results"]
        if len(rows) > 1:
            raise TorusError(f"several {kind}s named {ref!r}: say which project (--project)")
        return rows[0] if rows else None

    def locate(
        self, kind: str, ref: str, *, project: str | None = None, archived_first: bool = False
    ) -> dict:
        """As `find`, looking among the live ones and the archived ones (those first with
        `archived_first`): archiving or restoring finds its target either way, so the API,
        not a "not found" here, says why it cannot be archived again or restored."""
        for among in (archived_first, not archived_first):
            found = self.find(kind, ref, project=project, archived=among)
            if found is not None:
                return found
        where = f" in project {project}" if project else ""
        raise TorusError(f"no {kind} {ref!r}{where}", status=404, code="not_found")

    # -- archive and restore: read-only and hidden from lists, never deleted ------------

    def archive(self, kind: str, target_id: str, *, confirm: str) -> dict:
        """Archive a project, dataset, model or deployment by id: read-only, hidden from the
        default lists, its running work stopped; an admin may restore it. `confirm`: the
        project's slug or the thing's name (a mismatch is refused: 400 at `confirm`; already
        archived: 409)."""
        path = f"{_collection(kind)}{target_id}/archive/"
        return self.request("POST", path, json={"confirm": confirm})

    def restore(self, kind: str, target_id: str) -> dict:
        """Restore an archived one (409 when it is not archived, or already purged)."""
        return self.request("POST", f"{_collection(kind)}{target_id}/restore/")

    def archive_project(self, project: str, *, confirm: str) -> dict:
        """`project`: its id or slug; `confirm`: its slug."""
        return self.archive("project", self.locate("project", project)["id"], confirm=confirm)

    def restore_project(self, project: str) -> dict:
        found = self.locate("project", project, archived_first=True)
        return self.restore("project", found["id"])

    def archive_dataset(self, dataset_id: str, *, confirm: str) -> dict:
        return self.archive("dataset", dataset_id, confirm=confirm)

    def restore_dataset(self, dataset_id: str) -> dict:
        return self.restore("dataset", dataset_id)

    def archive_model(self, model_id: str, *, confirm: str) -> dict:
        return self.archive("model", model_id, confirm=confirm)

    def restore_model(self, model_id: str) -> dict:
        return self.restore("model", model_id)

    def archive_deployment(self, deployment_id: str, *, confirm: str) -> dict:
        return self.archive("deployment", deployment_id, confirm=confirm)

    def restore_deployment(self, deployment_id: str) -> dict:
        return self.restore("deployment", deployment_id)

    # -- project secrets: names and metadata out, values only in (never read back) --------

    def secrets(self, project: str) -> list[dict]:
        """A project's secrets: name, version, created_at, updated_at, updated_by; no values."""
        return list(self.paginate(f"/api/v1/projects/{self.project_id(project)}/secrets/"))

    def set_secret(self, project: str, name: str, value: str) -> dict:
        """Create or replace a secret (version 1 when new); the answer holds no value."""
        path = _secret_path(self.project_id(project), name)
        return self.request("PUT", path, json={"value": value})

    def delete_secret(self, project: str, name: str) -> None:
        self.request("DELETE", _secret_path(self.project_id(project), name))

    # -- notifications: your own subscriptions ------------------------------------------

    def subscriptions(self) -> list[dict]:
        return list(self.paginate("/api/v1/subscriptions/"))

    def subscribe(
        self,
        *,
        events: list[str],
        channel: str,
        address: str,
        project: str | None = None,
        job: str | None = None,
    ) -> dict:
        """A webhook's signing secret is in the answer, this once."""
        body: dict[str, Any] = {"events": events, "channel": channel, "address": address}
        if project:
            body["project"] = project
        if job:
            body["job"] = job
        return self.request("POST", "/api/v1/subscriptions/", json=body)

    def unsubscribe(self, subscription_id: str) -> None:
        self.request("DELETE", f"/api/v1/subscriptions/{subscription_id}/")

    def tokens(self) -> list[dict]:
        return list(self.paginate("/api/v1/tokens/"))

    def create_token(
        self, *, name: str, read_only: bool = False, expires_at: str | None = None, tenant=None
    ) -> dict:
        body: dict[str, Any] = {"name": name, "read_only": read_only}
        if expires_at:
            body["expires_at"] = expires_at
        if tenant:
            body["tenant"] = tenant
        return self.request("POST", "/api/v1/tokens/", json=body)

    def revoke_token(self, token_id: str) -> None:
        self.request("DELETE", f"/api/v1/tokens/{token_id}/")

    def usage(self, *, period: str | None = None, group_by: str = "project") -> list[dict]:
        params = {"group_by": group_by, **({"period": period} if period else {})}
        return self.request("GET", "/api/v1/usage/", params=params)["results"]

    def clusters(self) -> list[dict]:
        return list(self.paginate("/api/v1/clusters/"))

    def cluster_builds(self) -> list[dict]:
        """The background builds not done (the S3 store, a cluster, the engine): state, step."""
        return self.request("GET", "/api/v1/clusters/builds/")["results"]

    def nodes(self, *, cluster: str | None = None) -> list[dict]:
        return list(self.paginate("/api/v1/nodes/", cluster=cluster))

    def audit_events(self, *, action: str | None = None, limit: int = 100) -> list[dict]:
        rows = []
        for row in self.paginate("/api/v1/audit-events/", action=action):
            rows.append(row)
            if len(rows) >= limit:
                break
        return rows


# What may be archived, and the API collection of each.
ARCHIVABLE = {
    "project": "projects",
    "dataset": "datasets",
    "model": "models",
    "deployment": "deployments",
}


def _collection(kind: str) -> str:
    if kind not in ARCHIVABLE:
        raise ValueError(f"{kind!r}: one of {', '.join(ARCHIVABLE)}")
    return f"/api/v1/{ARCHIVABLE[kind]}/"


def _is_id(ref: str) -> bool:
    return len(ref) == 36 and ref.count("-") == 4


def _archived(archived: bool) -> dict:
    """The list filter: only the archived rows (the API's default hides them)."""
    return {"archived": "true"} if archived else {}


SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_secret_name(name: str) -> None:
    """The API's rule for a secret's name, checked here too: "a/b" is told as such, not as a
    404 of a path that does not exist."""
    if not SECRET_NAME.fullmatch(name):
        rule = "a letter or _, then letters, digits or _ (at most 128)"
        raise TorusError("Invalid input.", status=400, code="invalid", fields={"name": [rule]})


def _secret_path(project_id: str, name: str) -> str:
    check_secret_name(name)
    return f"/api/v1/projects/{project_id}/secrets/{name}/"


def api_error(response: httpx.Response) -> TorusError:
    """The API's error envelope of a failed response, as a TorusError."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = (body or {}).get("error", {}) if isinstance(body, dict) else {}
    return TorusError(
        error.get("message") or f"HTTP {response.status_code}",
        status=response.status_code,
        code=error.get("code", "error"),
        fields=error.get("fields"),
    )
