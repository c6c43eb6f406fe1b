"""An attempt's output on Kubernetes, read through the pod log API."""

from typing import TYPE_CHECKING

from apps.compute.backends.base import ClusterUnavailable, LogRef
from apps.compute.backends.kubernetes import names
from apps.compute.backends.kubernetes.client import ApiError

if TYPE_CHECKING:
    from apps.compute.backends.kubernetes.backend import KubernetesBackend


class PodLogSource:
    """An attempt's output through the pod log API: stdout is rank 0's pod log (Kubernetes
    keeps a container's stdout and stderr in one log, so stderr reads as empty). The log
    is read whole and sliced at the caller's byte offset."""

    def __init__(self, backend: "KubernetesBackend"):
        self.backend = backend

    def _pod(self, ref: LogRef) -> tuple[str, str] | None:
        if not ref.backend_id:
            return None
        records = self.backend.store.read(tag=ref.tag)[0]
        record = records.get(ref.tag) or next(iter(self.backend.store.gone({ref.tag})), None)
        if not record or not record.get("pods"):
            return None
        ns, _ = names.split_id(record["backend_id"])
        return ns, names.dns_subdomain(record["pods"][0], field="pod")

    def _log(self, ref: LogRef) -> bytes | None:
        pod = self._pod(ref)
        if pod is None:
            return None
        if ref.stream == "stderr":
            return b""
        try:
            response = self.backend.client._send(
                "GET", f"/api/v1/namespaces/{pod[0]}/pods/{pod[1]}/log"
            )
        except ApiError as exc:
            if exc.status in (400, 404):
                return None
            raise
        data = response.read()
        if response.status in (400, 404):  # not started, or gone
            return None
        if not 200 <= response.status < 300:
            raise ClusterUnavailable(f"pod log of {pod[0]}/{pod[1]}: HTTP {response.status}")
        return data

    def read(self, *, ref: LogRef, offset: int, limit: int) -> bytes | None:
        data = self._log(ref)
        return None if data is None else data[offset : offset + limit]

    def size(self, *, ref: LogRef) -> int | None:
        data = self._log(ref)
        return None if data is None else len(data)
