"""Following a Kubernetes cluster with watches, never per-job polling.

One ClusterWatch per cluster (the kube_watch command runs them; tests run one in a thread)
lists then watches four kinds: Torus Jobs, their pods (label torus.io/attempt), Kueue
Workloads and Nodes. A broken stream resumes from the last resourceVersion it saw
(bookmarks keep it fresh); a 410 Gone (the version was compacted away) relists that kind.
Compact copies of the objects stay in memory; a flusher turns them into one record per
Torus job and writes the records that changed to Redis (store.py), where the backend's jobs()
reads them all in one round trip: a reconcile pass costs no Kubernetes call for its jobs.

The watcher also takes back jobs the platform has ended although Kubernetes still holds
them (a pod on a lost node, an evicted pod, a Kueue preemption): it deletes the Job, so its
quota is free for the next attempt, which the reconciler opens on other nodes."""

import contextlib
import json
import logging
import threading
import time
from collections import defaultdict
from dataclasses import replace

from apps.compute.backends.base import ClusterUnavailable
from apps.compute.backends.kubernetes import outcomes, pending
from apps.compute.backends.kubernetes.client import ApiError, KubeClient
from apps.compute.backends.kubernetes.manifests import (
    MANAGED,
    TAG_PREFIX,
    cluster_queue_name,
    job_name,
)
from apps.compute.backends.kubernetes.names import InvalidValue
from apps.compute.backends.kubernetes.settings import KubeSettings
from apps.compute.backends.kubernetes.store import Store

logger = logging.getLogger(__name__)
SELECTORS = {
    "Job": ",".join(f"{k}={v}" for k, v in MANAGED.items()),
    "Pod": "torus.io/attempt-id",
    "Workload": "",
    "Node": "",
}


class ClusterWatch:
    def __init__(
        self,
        *,
        cluster_id,
        settings: KubeSettings,
        watch_timeout: int = 30,
        flush_interval: float = 0.1,
    ):
        self.cluster_id, self.settings = cluster_id, settings
        self.client = KubeClient(settings)
        self.store = Store(cluster_id)
        self.watch_timeout, self.flush_interval = watch_timeout, flush_interval
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.objects: dict[str, dict[tuple, dict]] = {k: {} for k in SELECTORS}
        self.versions: dict[str, str | None] = dict.fromkeys(SELECTORS)
        self.listed: set[str] = set()
        self.live: dict[str, bool] = dict.fromkeys(SELECTORS, False)
        self.streams: dict[str, object] = {}
        self.counters = defaultdict(int)  # lists, resumes, gone (410), events, deletes
        self.dirty: set[tuple] = set()
        self.replace_all = False
        self.written: dict[str, str] = {}  # tag -> JSON last written
        self.lost_nodes: dict[str, float] = {}
        self.taken_back: set[tuple] = set()
        self.pending_gone: dict[str, dict] = {}
        self.queued_tenants: set[str] = set()
        self.visible: dict[tuple, int] = {}  # (ns, job) -> position from Kueue's visibility API
        self.visibility = (
            KubeClient(replace(settings, api_url=settings.visibility_url.rstrip("/")))
            if settings.visibility_url
            else None
        )
        self.threads: list[threading.Thread] = []

    # -- running ---------------------------------------------------------------------------

    def start(self) -> "ClusterWatch":
        for kind in SELECTORS:
            t = threading.Thread(
                target=self._follow, args=(kind,), name=f"kube-watch-{kind}", daemon=True
            )
            t.start()
            self.threads.append(t)
        t = threading.Thread(target=self._flush_loop, name="kube-watch-flush", daemon=True)
        t.start()
        self.threads.append(t)
        if self.visibility is not None:
            t = threading.Thread(target=self._positions_loop, name="kube-watch-queue", daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _positions_loop(self, interval: float = 2.0) -> None:
        """Queue positions from Kueue's visibility API: one request per tenant queue that
        holds Torus jobs, every `interval` seconds (never per job)."""
        while not self.stopping.wait(interval):
            with self.lock:
                tenants = sorted(self.queued_tenants)
                workloads = {
                    (w["ns"], w["name"]): w["job"] for w in self.objects["Workload"].values()
                }
            found = {}
            for tenant in tenants:
                url = (
                    "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/"
                    f"{cluster_queue_name(tenant=tenant)}/pendingworkloads"
                )
                try:
                    body = self.visibility.request("GET", url)
                except (ApiError, ClusterUnavailable) as exc:
                    self.counters["visibility_errors"] += 1
                    logger.info("visibility API of cluster %s: %s", self.cluster_id, exc)
                    continue
                self.counters["visibility_requests"] += 1
                for item in body.get("items") or []:
                    meta = item.get("metadata") or {}
                    job = workloads.get((meta.get("namespace", ""), meta.get("name", "")))
                    if job:
                        found[(meta["namespace"], job)] = (
                            int(item.get("positionInClusterQueue", 0)) + 1
                        )
            with self.lock:
                if found != self.visible:
                    self.dirty.update(set(found) | set(self.visible))
                    self.visible = found

    def stop(self) -> None:
        self.stopping.set()
        self.interrupt()
        for t in self.threads:
            t.join(timeout=self.watch_timeout + 20)

    def interrupt(self, kind: str | None = None) -> None:
        """Break every open stream, or `kind`'s (as a network failure would); each resumes."""
        for k, raw in list(self.streams.items()):
            if kind in (None, k):
                with contextlib.suppress(Exception):  # a stream already closed
                    raw.shutdown()

    def wait_synced(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.listed == set(SELECTORS) and not self.dirty:
                return
            time.sleep(0.05)
        raise TimeoutError(f"the watch of cluster {self.cluster_id} did not sync")

    def _follow(self, kind: str) -> None:
        delay = 0.5
        while not self.stopping.is_set():
            try:
                if self.versions[kind] is None:
                    self._list(kind)
                else:
                    self.counters[f"resumes:{kind}"] += 1
                self.live[kind] = True
                for event in self.client.watch(
                    kind,
                    resource_version=self.versions[kind],
                    label_selector=SELECTORS[kind],
                    timeout_seconds=self.watch_timeout,
                    on_open=lambda raw, kind=kind: self.streams.__setitem__(kind, raw),
                ):
                    self._event(kind, event)
                    if self.stopping.is_set():
                        return
                delay = 0.5
            except ApiError as exc:
                if exc.status == 410:  # our version was compacted away: start over
                    self.counters[f"gone:{kind}"] += 1
                    self.versions[kind] = None
                    continue
                logger.warning("watch of %s on cluster %s: %s", kind, self.cluster_id, exc)
                self.live[kind] = False
                self.stopping.wait(delay)
                delay = min(delay * 2, 10)
            except (ClusterUnavailable, ValueError) as exc:
                self.live[kind] = False
                if self.stopping.is_set():
                    return
                logger.info("watch of %s on cluster %s broke: %s", kind, self.cluster_id, exc)
                self.stopping.wait(delay)
                delay = min(delay * 2, 10)
            finally:
                self.streams.pop(kind, None)

    def _list(self, kind: str) -> None:
        query = {"labelSelector": SELECTORS[kind]} if SELECTORS[kind] else None
        body = self.client.get(kind, query=query)
        self.counters[f"lists:{kind}"] += 1
        compact = COMPACT[kind]
        fresh = {
            (o["metadata"].get("namespace", ""), o["metadata"]["name"]): compact(o)
            for o in body.get("items") or []
        }
        with self.lock:
            before = self.objects[kind]
            if kind == "Node":
                for name in {k[1] for k in before} - {k[1] for k in fresh}:
                    self.lost_nodes[name] = time.time()
            if kind == "Job":
                for key in set(before) - set(fresh):
                    self._job_gone(before[key])
                self.replace_all = True
            self.objects[kind] = fresh
            self.versions[kind] = body["metadata"]["resourceVersion"]
            self.listed.add(kind)
            self.dirty.update(self.objects["Job"])

    def _event(self, kind: str, event: dict) -> None:
        obj = event["object"]
        self.versions[kind] = obj["metadata"]["resourceVersion"]
        if event["type"] == "BOOKMARK":
            return
        self.counters["events"] += 1
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        with self.lock:
            if event["type"] == "DELETED":
                old = self.objects[kind].pop(key, None)
                if kind == "Job" and old is not None:
                    self._job_gone(old)
                    self.dirty.discard(key)
                    return
                if kind == "Node":
                    self.lost_nodes[key[1]] = time.time()
                    self._dirty_on_node(key[1])
            else:
                self.objects[kind][key] = COMPACT[kind](obj)
                if kind == "Node":
                    node = self.objects[kind][key]
                    if node["ready"]:
                        self.lost_nodes.pop(key[1], None)
                    else:
                        self.lost_nodes[key[1]] = time.time()
                        self._dirty_on_node(key[1])
            if kind == "Job":
                self.dirty.add(key)
            elif kind == "Pod":
                self.dirty.add((key[0], job_of_pod(obj)))
            elif kind == "Workload":
                owner = self.objects[kind].get(key) or COMPACT[kind](obj)
                # a workload's admission moves every job behind it in its queue
                self.dirty.update(
                    k
                    for k, j in self.objects["Job"].items()
                    if j["tenant"] == self._tenant_of(owner)
                )
                self.dirty.add((key[0], owner["job"]))

    def _tenant_of(self, workload: dict) -> str:
        job = self.objects["Job"].get((workload["ns"], workload["job"]))
        return job["tenant"] if job else ""

    def _dirty_on_node(self, node: str) -> None:
        attempts = {p["attempt"] for p in self.objects["Pod"].values() if p["node"] == node}
        self.dirty.update(
            k for k, j in self.objects["Job"].items() if j["tag"][len(TAG_PREFIX) :] in attempts
        )

    def _job_gone(self, job: dict) -> None:
        """A Job left the cluster: its last record, ended (or Deleted: cancelled), is kept
        for accounting()."""
        tag = job["tag"]
        last = json.loads(self.written.pop(tag, "null")) or self._summary(job)
        if last["state"] not in outcomes.ENDED_WORDS:
            last.update(state="Deleted", reason="the Job was deleted before it ended")
            last["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.pending_gone[tag] = last
        self.taken_back.discard((job["ns"], job["name"]))

    # -- flushing --------------------------------------------------------------------------

    def _indexes(self) -> tuple[dict, dict]:
        """(pods by (namespace, attempt), workloads by (namespace, job name))."""
        pods = defaultdict(list)
        for pod in self.objects["Pod"].values():
            pods[(pod["ns"], pod["attempt"])].append(pod)
        workloads = {(w["ns"], w["job"]): w for w in self.objects["Workload"].values()}
        return pods, workloads

    def _summary(
        self, job: dict, positions: dict | None = None, indexes: tuple | None = None
    ) -> dict:
        pods, workloads = indexes or self._indexes()
        record = outcomes.summarise(
            job=job,
            pods=pods.get((job["ns"], job["tag"][len(TAG_PREFIX) :]), []),
            workload=workloads.get((job["ns"], job["name"])),
            lost_nodes=set(self.lost_nodes),
            retryable=self.settings.retryable_exit_codes,
        )
        if positions is not None and record["state"] == "Queued":
            record["position"] = positions.get((job["ns"], job["name"]))
        return record

    def _flush_loop(self) -> None:
        last_beat = 0.0
        while not self.stopping.is_set():
            try:
                self.flush()
                if (
                    self.listed == set(SELECTORS)
                    and all(self.live.values())
                    and time.time() - last_beat > 1
                ):
                    self.store.heartbeat()
                    last_beat = time.time()
            except Exception:  # Redis down a moment: try again
                logger.exception("flushing the watch of cluster %s", self.cluster_id)
            self.stopping.wait(self.flush_interval)

    def flush(self) -> None:
        with self.lock:
            if self.listed != set(SELECTORS):
                return
            dirty, self.dirty = self.dirty, set()
            gone, self.pending_gone = self.pending_gone, {}
            replace, self.replace_all = self.replace_all, False
            jobs = self.objects["Job"]
            queued = defaultdict(list)
            indexes = self._indexes()
            for key, job in jobs.items():
                w = indexes[1].get(key)
                reserved = ((w or {}).get("conditions") or {}).get("QuotaReserved") or {}
                if w and job["suspended"] and reserved.get("status") != "True":
                    queued[job["tenant"]].append(w)
            self.queued_tenants = set(queued)
            positions = pending.positions(queued) | self.visible
            changed, take_back = {}, []
            for key in dirty if not replace else set(jobs):
                job = jobs.get(key)
                if job is None or not job["tag"].startswith(TAG_PREFIX):
                    continue
                record = self._summary(job, positions, indexes)
                text = json.dumps(record, sort_keys=True)
                if replace or self.written.get(job["tag"]) != text:
                    self.written[job["tag"]] = text
                    changed[job["tag"]] = record
                if record["state"] in outcomes.TAKEN_BACK and key not in self.taken_back:
                    self.taken_back.add(key)
                    take_back.append(key)
            lost = dict(self.lost_nodes)
        if changed or gone or replace:
            self.store.write(changed=changed, removed=set(gone), gone=gone, replace=replace)
        self.store.lost_nodes(lost)
        for ns, name in take_back:
            try:
                self.client.delete("Job", namespace=ns, name=name)
                self.counters["deletes"] += 1
            except ApiError as exc:
                if exc.status != 404:
                    logger.warning("taking back %s/%s: %s", ns, name, exc)
            except ClusterUnavailable:
                with self.lock:
                    self.taken_back.discard((ns, name))
                    self.dirty.add((ns, name))


def _compact_node(obj: dict) -> dict:
    ready = next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {}
    )
    return {"name": obj["metadata"]["name"], "ready": ready.get("status") == "True"}


def job_of_pod(pod: dict) -> str:
    attempt = (pod["metadata"].get("labels") or {}).get("torus.io/attempt-id", "")
    try:
        return job_name(tag=TAG_PREFIX + attempt)
    except InvalidValue:
        return ""


COMPACT = {
    "Job": outcomes.compact_job,
    "Pod": outcomes.compact_pod,
    "Workload": outcomes.compact_workload,
    "Node": _compact_node,
}
