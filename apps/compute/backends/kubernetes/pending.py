"""Why a job waits, in the platform's words, and where it stands in its queue.

Kueue's reason is the Workload's QuotaReserved condition (e.g. "couldn't assign flavors to
pod set main: insufficient unused quota for nvidia.com/gpu in flavor pool-a, 8 more needed");
the scheduler's is the pod's PodScheduled condition, which carries the same text as its
FailedScheduling event ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.").

The position is computed from the pending Workloads of the tenant's ClusterQueue ordered as
Kueue's BestEffortFIFO orders them (priority, then creation time; a requeued workload by its
eviction time), since the local Kueue runs without its visibility API server."""


def queue_order(workload: dict) -> tuple:
    evicted = (workload.get("conditions") or {}).get("Evicted") or {}
    since = evicted.get("lastTransitionTime") if evicted.get("status") == "True" else ""
    return (
        -int(workload.get("priority") or 0),
        since or workload.get("created") or "",
        workload.get("name", ""),
    )


def positions(pending: dict[str, list[dict]]) -> dict[tuple[str, str], int]:
    """{(namespace, job name): 1-based position} for every queue's pending workloads
    (`pending`: queue key -> workloads not yet holding quota)."""
    out = {}
    for workloads in pending.values():
        for n, workload in enumerate(sorted(workloads, key=queue_order), start=1):
            out[(workload["ns"], workload["job"])] = n
    return out


def waiting_message(*, state: str, reason: str, position: int | None) -> str:
    where = f" (position {position})" if position else ""
    if state == "Queued":
        return f"waiting in Kueue: {reason}{where}" if reason else f"waiting in Kueue{where}"
    return f"waiting in Kubernetes: {reason}" if reason else "waiting in Kubernetes"
