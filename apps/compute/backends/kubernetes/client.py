"""One thin REST layer over the official client's ApiClient (TLS, bearer token, connection
pool): every request the backend and the watcher make goes through `KubeClient.request`, so
they are counted in one place (`calls`) and their failures translated in one place."""

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s

from apps.compute.backends.base import ClusterUnavailable, SubmitRejected
from apps.compute.backends.kubernetes.settings import KubeSettings

# kind -> (API path prefix, plural, namespaced)
KINDS = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "Service": ("/api/v1", "services", True),
    "Secret": ("/api/v1", "secrets", True),
    "Event": ("/api/v1", "events", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "PersistentVolume": ("/api/v1", "persistentvolumes", False),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "ResourceFlavor": ("/apis/kueue.x-k8s.io/v1beta2", "resourceflavors", False),
    "ClusterQueue": ("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    "LocalQueue": ("/apis/kueue.x-k8s.io/v1beta2", "localqueues", True),
    "Workload": ("/apis/kueue.x-k8s.io/v1beta2", "workloads", True),
}
FIELD_MANAGER = "torus"

_api_clients: dict[tuple, k8s.ApiClient] = {}
_lock = threading.Lock()


class ApiError(Exception):
    """The apiserver answered with an error status."""

    def __init__(self, status: int, body: dict | str):
        self.status, self.body = status, body
        message = body.get("message") if isinstance(body, dict) else str(body)[:500]
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        super().__init__(f"HTTP {status}: {message}")


def path(kind: str, *, namespace: str | None = None, name: str | None = None) -> str:
    prefix, plural, namespaced = KINDS[kind]
    out = prefix
    if namespaced and namespace:
        out += f"/namespaces/{quote(namespace, safe='')}"
    out += f"/{plural}"
    if name:
        out += f"/{quote(name, safe='')}"
    return out


def _api_client(settings: KubeSettings) -> k8s.ApiClient:
    try:
        token = Path(settings.token_file).read_text().strip() if settings.token_file else ""
    except OSError as exc:
        raise ClusterUnavailable(f"cannot read the token {settings.token_file}: {exc}") from exc
    key = (settings.api_url, settings.ca_file, token)
    with _lock:
        api = _api_clients.get(key)
        if api is None:
            conf = k8s.Configuration(host=settings.api_url)
            conf.ssl_ca_cert = settings.ca_file or None
            conf.verify_ssl = True
            if token:
                conf.api_key = {"authorization": token}
                conf.api_key_prefix = {"authorization": "Bearer"}
            conf.connection_pool_maxsize = 16
            api = k8s.ApiClient(conf)
            _api_clients[key] = api
        return api


class KubeClient:
    calls = 0  # requests made by every client in this process (the bench reads it)
    _calls_lock = threading.Lock()

    def __init__(self, settings: KubeSettings):
        self.settings = settings
        self.api = _api_client(settings)

    def _send(self, method, url_path, *, query=None, body=None, content_type=None, timeout=None):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self.api.param_serialize(
            method=method,
            resource_path=url_path,
            query_params=list((query or {}).items()) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        with KubeClient._calls_lock:
            KubeClient.calls += 1
        try:
            return self.api.call_api(*request, _request_timeout=timeout or self.settings.timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterUnavailable(f"Kubernetes API at {self.settings.api_url}: {exc}") from exc
        except k8s.ApiException as exc:  # raised by the REST layer for some statuses
            raise _error(exc.status or 0, exc.body) from exc

    def request(self, method: str, url_path: str, **kwargs) -> dict:
        response = self._send(method, url_path, **kwargs)
        raw = response.read()
        if not 200 <= response.status < 300:
            raise _error(response.status, raw)
        return json.loads(raw) if raw else {}

    # -- helpers -------------------------------------------------------------------------

    def get(self, kind: str, *, namespace=None, name=None, query=None) -> dict:
        return self.request("GET", path(kind, namespace=namespace, name=name), query=query)

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        query = {"fieldValidation": "Strict", "fieldManager": FIELD_MANAGER}
        if dry_run:
            query["dryRun"] = "All"
        meta = obj["metadata"]
        url = path(obj["kind"], namespace=meta.get("namespace"))
        return self.request("POST", url, query=query, body=obj)

    def apply(self, obj: dict, *, dry_run: bool = False) -> dict:
        """Server-side apply: create or bring to this state, in one request."""
        query = {"fieldValidation": "Strict", "fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        meta = obj["metadata"]
        url = path(obj["kind"], namespace=meta.get("namespace"), name=meta["name"])
        return self.request(
            "PATCH", url, query=query, body=obj, content_type="application/apply-patch+yaml"
        )

    def delete(self, kind: str, *, namespace=None, name: str) -> dict:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        return self.request("DELETE", path(kind, namespace=namespace, name=name), body=body)

    def watch(
        self,
        kind: str,
        *,
        resource_version: str,
        label_selector: str = "",
        timeout_seconds: int = 30,
        on_open=None,
    ) -> Iterator[dict]:
        """Events of one watch request, from `resource_version`, bookmarks on. Ends when the
        server closes the stream; an ERROR event (e.g. 410 Gone) raises ApiError."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        url = path(kind)
        response = self._send("GET", url, query=query, timeout=(5, timeout_seconds + 15))
        if not 200 <= response.status < 300:
            raise _error(response.status, response.read())
        raw = response.response
        if on_open is not None:
            on_open(raw)  # lets the caller break the stream
        buffer = b""
        try:
            for chunk in raw.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(int(status.get("code") or 500), status)
                    yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterUnavailable(f"watch of {kind}: {exc}") from exc
        finally:
            raw.release_conn()


def _error(status: int, raw) -> Exception:
    try:
        body = json.loads(raw) if raw else {}
    except (ValueError, TypeError):
        body = {"message": raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)}
    error = ApiError(status, body)
    if status in (0, 401, 403, 429) or status >= 500:  # not the job's fault: later
        return ClusterUnavailable(str(error))
    if status in (400, 422):
        rejected = SubmitRejected(f"the apiserver refused it: {error}")
        rejected.api_error = error
        return rejected
    return error
