"""What a Torus job is on Kubernetes, from its Job, its pods and its Kueue Workload (as the
watcher keeps them, compacted): a state word of this backend, then the attempt state.

State words: Queued (Kueue has not admitted it), Pending (admitted, pods not all running),
Running, Succeeded, Failed, DeadlineExceeded, OOMKilled, NodeLost (a pod's node went away
or was lost), Evicted (a pod was evicted or disrupted), Preempted (Kueue took its quota
back), Deleted (the Job went away before it ended: cancelled)."""

from datetime import UTC, datetime

from apps.compute.backends.base import BackendJob

OUTCOMES = {
    "Queued": "SUBMITTED",
    "Pending": "SUBMITTED",
    "Running": "RUNNING",
    "Succeeded": "SUCCEEDED",
    "Failed": "FAILED",
    "OOMKilled": "FAILED",
    "DeadlineExceeded": "TIMEOUT",
    "NodeLost": "NODE_FAIL",
    "Evicted": "NODE_FAIL",
    "Preempted": "PREEMPTED",
    "Deleted": "CANCELLED",
}
ENDED_WORDS = frozenset(w for w, s in OUTCOMES.items() if s not in ("SUBMITTED", "RUNNING"))
# Ended for the platform although Kubernetes may still hold pods: the watcher deletes them.
TAKEN_BACK = frozenset({"NodeLost", "Evicted", "Preempted"})
DISRUPTION_REASONS = {
    "PreemptionByScheduler": "Preempted",
    "PreemptionByKubeScheduler": "Preempted",
    "DeletionByTaintManager": "NodeLost",
    "DeletionByPodGC": "NodeLost",
    "TerminationByKubelet": "Evicted",
    "EvictionByEvictionAPI": "Evicted",
}


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _conditions(obj: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


# -- compact copies (what the watcher keeps of each object) -------------------------------


def compact_job(obj: dict) -> dict:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    return {
        "ns": meta["namespace"],
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "tag": (meta.get("annotations") or {}).get("torus.io/tag", ""),
        "tenant": (meta.get("labels") or {}).get("torus.io/tenant", ""),
        "created": meta.get("creationTimestamp"),
        "suspended": bool(spec.get("suspend")),
        "nodes": int(spec.get("parallelism") or 1),
        "active": int(status.get("active") or 0),
        "ready": int(status.get("ready") or 0),
        "succeeded": int(status.get("succeeded") or 0),
        "failed": int(status.get("failed") or 0),
        "start": status.get("startTime"),
        "end": status.get("completionTime"),
        "conditions": [
            {k: c.get(k, "") for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in status.get("conditions") or []
        ],
    }


def compact_pod(obj: dict) -> dict:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    terminated, waiting = {}, ""
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        last = (cs.get("lastState") or {}).get("terminated")
        if state.get("terminated") or last:
            terminated = state.get("terminated") or last
        if state.get("waiting"):
            waiting = state["waiting"].get("reason", "")
    conditions = _conditions(obj)
    scheduled = conditions.get("PodScheduled") or {}
    disruption = conditions.get("DisruptionTarget") or {}
    return {
        "ns": meta["namespace"],
        "name": meta["name"],
        "attempt": (meta.get("labels") or {}).get("torus.io/attempt-id", ""),
        "index": int(
            (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index") or 0
        ),
        "node": spec.get("nodeName") or "",
        "phase": status.get("phase") or "Pending",
        "reason": status.get("reason") or "",
        "deleting": bool(meta.get("deletionTimestamp")),
        "unscheduled": scheduled.get("message", "") if scheduled.get("status") == "False" else "",
        "disruption": disruption.get("reason", "") if disruption.get("status") == "True" else "",
        "exit_code": terminated.get("exitCode"),
        "signal": terminated.get("signal"),
        "term_reason": terminated.get("reason", ""),
        "waiting": waiting,
        "start": status.get("startTime"),
        "end": terminated.get("finishedAt"),
        "ip": status.get("podIP") or "",
    }


def compact_workload(obj: dict) -> dict:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    owner = next(
        (o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"), ""
    )
    conditions = _conditions(obj)
    return {
        "ns": meta["namespace"],
        "name": meta["name"],
        "job": owner,
        "queue": spec.get("queueName", ""),
        "priority": int(spec.get("priority") or 0),
        "created": meta.get("creationTimestamp") or "",
        "conditions": {
            t: {k: c.get(k, "") for k in ("status", "reason", "message", "lastTransitionTime")}
            for t, c in conditions.items()
        },
    }


# -- the summary -------------------------------------------------------------------------


def _true(conditions: list[dict] | dict, kind: str) -> dict | None:
    items = conditions.values() if isinstance(conditions, dict) else conditions
    for c in items:
        if (c.get("type", kind) == kind) and c.get("status") == "True":
            return c
    return None


def summarise(
    *,
    job: dict,
    pods: list[dict],
    workload: dict | None,
    lost_nodes: set[str],
    retryable: tuple[int, ...] = (),
) -> dict:
    """A BackendJob's fields (a plain dict, as stored) for one Job."""
    pods = sorted(pods, key=lambda p: (p["index"], p["name"]))
    nodes = sorted({p["node"] for p in pods if p["node"]})
    word, reason, exit_code, signal = "Queued", "", None, None
    failed = [p for p in pods if p["phase"] == "Failed" or p["exit_code"] not in (None, 0)]
    first_failed = failed[0] if failed else None
    if first_failed:
        exit_code, signal = first_failed["exit_code"], first_failed["signal"]
    complete = _true(job["conditions"], "Complete")
    job_failed = _true(job["conditions"], "Failed")
    wl_conditions = (workload or {}).get("conditions") or {}
    evicted = wl_conditions.get("Evicted") or {}
    lost = [
        p for p in pods if p["node"] in lost_nodes and p["phase"] not in ("Succeeded", "Failed")
    ]
    disrupted = [p for p in pods if p["disruption"]]
    if complete:
        word = "Succeeded"
    elif lost:
        word, reason = "NodeLost", f"node {lost[0]['node']} was lost"
    elif disrupted:
        p = disrupted[0]
        word = DISRUPTION_REASONS.get(p["disruption"], "Evicted")
        reason = f"pod {p['name']} on {p['node'] or 'no node'}: {p['disruption']}"
    elif any(p["reason"] == "Evicted" for p in pods):
        p = next(p for p in pods if p["reason"] == "Evicted")
        word, reason = "Evicted", f"pod {p['name']} evicted from {p['node']}"
    elif evicted.get("status") == "True" and evicted.get("reason") in (
        "Preempted",
        "InCohortReclamation",
        "InClusterQueue",
    ):
        word, reason = "Preempted", f"preempted by Kueue: {evicted.get('message', '')}".strip()
    elif job_failed:
        why = job_failed.get("reason", "")
        if why == "DeadlineExceeded":
            word, reason = "DeadlineExceeded", job_failed.get("message", "")
        elif first_failed and (
            first_failed["term_reason"] == "OOMKilled" or first_failed["exit_code"] == 137
        ):
            word, reason = "OOMKilled", f"pod {first_failed['name']}: out of memory (exit 137)"
            exit_code = 137
        elif first_failed is None:  # its pods went away unfinished: deleted or lost
            word, reason = "Evicted", f"a pod was deleted before it ended ({why})"
        else:
            word = "Failed"
            reason = first_failed["term_reason"] or why
        if exit_code is not None and exit_code in retryable and word in ("Failed", "OOMKilled"):
            word, reason = "NodeLost", f"exit code {exit_code} (retryable on this cluster)"
    elif job["suspended"]:
        word = "Queued"
        reserved = wl_conditions.get("QuotaReserved") or {}
        reason = reserved.get("message", "") if reserved.get("status") != "True" else ""
    elif _true(job["conditions"], "SuccessCriteriaMet") or any(
        p["node"] and p["phase"] in ("Running", "Succeeded", "Failed") for p in pods
    ):
        # Started: between its pods' ends and the Job's Complete/Failed condition it is
        # still running, never waiting again.
        word = "Running"
    else:
        word = "Pending"
        unscheduled = next((p["unscheduled"] for p in pods if p["unscheduled"]), "")
        waiting = next((p["waiting"] for p in pods if p["waiting"]), "")
        reason = unscheduled or waiting
    started = [parse_time(p["start"]) for p in pods if p["start"] and p["node"]]
    created = parse_time(job.get("created"))
    return {
        "backend_id": f"{job['ns']}/{job['name']}",
        "tag": job["tag"],
        "state": word,
        "reason": reason,
        "nodes": nodes,
        "exit_code": 0 if word == "Succeeded" else exit_code,
        "signal": signal,
        "started_at": job.get("start")
        or (min(started).strftime("%Y-%m-%dT%H:%M:%SZ") if started else None),
        "ended_at": job.get("end") or _ended(job, word),
        "order": int(created.timestamp() * 1000) if created else 0,
        "tenant": job.get("tenant", ""),
        "pods": [p["name"] for p in pods],
        "hosts": [p.get("ip", "") for p in pods if p["phase"] == "Running" and not p["deleting"]],
    }


def _ended(job: dict, word: str) -> str | None:
    if word not in ENDED_WORDS:
        return None
    for kind in ("Failed", "Complete"):
        c = _true(job["conditions"], kind)
        if c and c.get("lastTransitionTime"):
            return c["lastTransitionTime"]
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def backend_job(record: dict) -> BackendJob:
    return BackendJob(
        backend_id=record["backend_id"],
        tag=record["tag"],
        state=record["state"],
        reason=record.get("reason") or "",
        nodes=list(record.get("nodes") or []),
        exit_code=record.get("exit_code"),
        signal=record.get("signal"),
        started_at=parse_time(record.get("started_at")),
        ended_at=parse_time(record.get("ended_at")),
        order=int(record.get("order") or 0),
        queue_position=record.get("position"),
    )


def attempt_state(word: str) -> str:
    return OUTCOMES.get(word, "SUBMITTED")
