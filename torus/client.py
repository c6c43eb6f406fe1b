"""torus.Client: a thin, typed wrapper over the REST API."""

from collections.abc import Iterator
from typing import Any

import httpx

from torus.config import load_settings
from torus.errors import TorusError


class Client:
    """client = torus.Client()  # URL and token from the environment or the config file"""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30):
        settings = load_settings(url=url, token=token)
        headers = {"Accept": "application/json", "User-Agent": "torus-sdk"}
        if settings.token:
            headers["Authorization"] = f"Bearer {settings.token}"
        self.url = settings.url
        self._http = httpx.Client(base_url=settings.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------

    def request(self, method: str, path: str, *, json: Any = None, params=None) -> Any:
        try:
            response = self._http.request(method, path, json=json, params=params)
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

    def projects(self, *, tenant: str | None = None) -> list[dict]:
        return list(self.paginate("/api/v1/projects/", tenant=tenant))

    def create_project(self, *, name: str, slug: str, description: str = "", tenant=None) -> dict:
        body = {"name": name, "slug": slug, "description": description}
        if tenant:
            body["tenant"] = tenant
        return self.request("POST", "/api/v1/projects/", json=body)

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

    def audit_events(self, *, action: str | None = None, limit: int = 100) -> list[dict]:
        rows = []
        for row in self.paginate("/api/v1/audit-events/", action=action):
            rows.append(row)
            if len(rows) >= limit:
                break
        return rows
