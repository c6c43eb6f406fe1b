"""bench/load/run.py's analysis: percentiles, the checks per endpoint, the Markdown report."""

import _api


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)

    def pick(q: float) -> float:  # nearest rank, as bench/_common.py
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "max": round(ordered[-1], 1),
        "mean": round(sum(ordered) / len(ordered), 1),
    }


def analyse(
    samples: list, started: float, ramp: float, read_bound: float, submit_bound: float
) -> dict:
    """Per endpoint over the whole run (the checks) and after the ramp (`ramp` seconds: all
    users started, their first TLS handshakes done), which shows what the ramp adds."""
    by_name: dict[tuple[str, str], dict] = {}
    errors: dict[str, int] = {}
    for t, kind, name, ms, error in samples:
        entry = by_name.setdefault((kind, name), {"times": [], "failures": 0, "steady": []})
        entry["times"].append(ms)
        if t - started >= ramp:
            entry["steady"].append(ms)
        if error:
            entry["failures"] += 1
            key = f"{kind} {name}: {error}"
            errors[key] = errors.get(key, 0) + 1
    endpoints = []
    for (kind, name), entry in sorted(by_name.items(), key=lambda kv: kv[0][1]):
        is_read = kind in {"GET", "WS"}
        is_submit = kind == "POST"
        stats = percentiles(entry["times"])
        row = {
            "type": kind,
            "name": name,
            "requests": len(entry["times"]),
            "failures": entry["failures"],
            **stats,
            "p95_after_ramp": percentiles(entry["steady"]).get("p95"),
            "class": "read" if is_read else "submit" if is_submit else "end-to-end (not a request)",
        }
        if is_read:
            row["p95_bound_ms"] = read_bound
            row["met"] = stats["p95"] < read_bound
        elif is_submit:
            row["p95_bound_ms"] = submit_bound
            row["met"] = stats["p95"] < submit_bound
        endpoints.append(row)
    reads = [ms for _t, kind, _n, ms, _e in samples if kind in {"GET", "WS"}]
    submits = [ms for _t, kind, _n, ms, _e in samples if kind == "POST"]
    requests = [s for s in samples if s[1] != "JOB"]
    timeline = []
    window = 30
    for lo in range(0, int(max((s[0] for s in samples), default=started) - started) + 1, window):
        inside = [s for s in requests if lo <= s[0] - started < lo + window]
        reads_in = [s[3] for s in inside if s[1] in {"GET", "WS"}]
        timeline.append(
            {
                "from_s": lo,
                "requests": len(inside),
                "per_second": round(len(inside) / window, 1),
                "reads_p95": percentiles(reads_in).get("p95"),
                "submits_p95": percentiles([s[3] for s in inside if s[1] == "POST"]).get("p95"),
                "failures": sum(1 for s in inside if s[4]),
            }
        )
    failures = sum(1 for s in requests if s[4])  # HTTP and websocket errors
    job_outcomes = [s[4] for s in samples if s[1] == "JOB" and s[4]]
    return {
        "endpoints": endpoints,
        "reads_all": percentiles(reads),
        "submits_all": percentiles(submits),
        "requests": len(requests),
        "failures": failures,
        "pipeline_jobs_not_succeeded": len(job_outcomes),
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:20]),
        "timeline": timeline,
        "checks": {
            "reads_p95_under_bound": {
                "bound_ms": read_bound,
                "met": [r["name"] for r in endpoints if r["class"] == "read" and r["met"]],
                "not_met": [r["name"] for r in endpoints if r["class"] == "read" and not r["met"]],
            },
            "no_errors": {"met": failures == 0, "failures": failures},
            "submits_p95_under_bound": {
                "bound_ms": submit_bound,
                "p95_ms": percentiles(submits).get("p95"),
                "met": bool(submits) and percentiles(submits)["p95"] < submit_bound,
            },
        },
    }


def markdown(result: dict) -> str:
    m = result["metrics"]
    env = m["environment"]
    lines = [
        f"# Load test {m['stamp']}: {m['users']} users, {m['duration_s']} s (bench/load/run.py)",
        "",
        f"Deployment: TORUS_SCALE={env['deployment']['scale']} "
        f"({env['deployment']['web_servers']} uvicorn behind HAProxy, "
        f"{env['deployment']['workers']} workers), {_api.HOST}. "
        f"Load average start {env['loadavg_start']}, end {env['loadavg_end']}, "
        f"max 1-min during the run {env['loadavg_1min_max']} on {env['cpus']} cores.",
        "",
        "| endpoint | class | requests | failures | p50 ms | p95 ms | p99 ms | max ms"
        f" | p95 after {m['ramp_seconds']:.0f} s | aim | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in m["endpoints"]:
        aim = f"p95 < {r['p95_bound_ms']:.0f}" if "p95_bound_ms" in r else "-"
        met = "-" if "met" not in r else ("yes" if r["met"] else "**no**")
        lines.append(
            f"| `{r['name']}` | {r['class']} | {r['requests']} | {r['failures']} | "
            f"{r['p50']} | {r['p95']} | {r['p99']} | {r['max']} | {r['p95_after_ramp']} | {aim} | "
            f"{met} |"
        )
    c = m["checks"]
    lines += [
        "",
        f"All reads: {m['reads_all']}; submits: {m['submits_all']}.",
        f"Requests {m['requests']} ({m['requests_per_second']}/s), failures {m['failures']}; "
        f"pipeline jobs that did not succeed: {m['pipeline_jobs_not_succeeded']}.",
        "",
        f"- reads p95 < {c['reads_p95_under_bound']['bound_ms']:.0f} ms: not met by "
        f"{c['reads_p95_under_bound']['not_met'] or 'none'}",
        f"- no errors: {'met' if c['no_errors']['met'] else 'not met'} "
        f"({c['no_errors']['failures']} failures)",
        f"- submits p95 < {c['submits_p95_under_bound']['bound_ms']:.0f} ms: "
        f"{'met' if c['submits_p95_under_bound']['met'] else 'not met'} "
        f"(p95 {c['submits_p95_under_bound']['p95_ms']} ms)",
        "",
        f"Jobs: {m['jobs']}",
        f"Slurm queue before/after: {m['slurm_queue_before']} / {m['slurm_queue_after']}",
        f"Websocket: {m['websocket']}",
        f"Websocket connect+backlog by phase (ms): {m['websocket_connect_phases']}",
        "",
        "CPU during the run (seconds, all cores): "
        + ", ".join(f"{k} {v}" for k, v in env["cpu"]["by_category_cpu_seconds"].items()),
        "",
        "Timeline (30 s windows): "
        + "; ".join(
            f"{w['from_s']}s: {w['per_second']}/s reads p95 {w['reads_p95']} "
            f"submits p95 {w['submits_p95']} fail {w['failures']}"
            for w in m["timeline"]
        ),
    ]
    if m["errors"]:
        lines += ["", "Errors:", *[f"- {n} x {e}" for e, n in m["errors"].items()]]
    lines += ["", f"Command: `{m['command']}`", ""]
    return "\n".join(lines)
