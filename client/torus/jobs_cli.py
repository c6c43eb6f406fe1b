"""`torus` subcommands for jobs: submit, jobs, show, cancel, restart, logs, usage, clusters."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

from torus.client import Client
from torus.errors import TorusError
from torus.output import emit, table

JOB_COLUMNS = ["id", "name", "project_slug", "user", "state", "starts", "gpus", "created_at"]


def load_spec(path: str) -> dict:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise TorusError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        spec = yaml.safe_load(text)  # YAML is a superset of JSON
    except yaml.YAMLError as exc:
        raise TorusError(f"{path} is not valid YAML or JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise TorusError(f"{path} must hold a mapping (a job spec), not {type(spec).__name__}")
    return spec


def resolve_project(client: Client, ref: str) -> str:
    """A project id from an id or a slug (Client.project_id)."""
    return client.project_id(ref)


def _progress(job: dict) -> None:
    position = f" (#{job['queue_position']} in queue)" if job.get("queue_position") else ""
    reason = f": {job['state_reason']}" if job.get("state_reason") else ""
    print(f"[{job['name']}] {job['state']}{position}{reason}", file=sys.stderr, flush=True)


def cmd_submit(client: Client, args) -> int:
    spec = load_spec(args.file)
    _inference_options(spec, args)
    if args.project:
        spec["project"] = args.project
    if "project" not in spec:
        raise TorusError("say which project: a `project:` key in the spec or --project")
    spec["project"] = resolve_project(client, str(spec["project"]))
    if args.name:
        spec["name"] = args.name
    job = client.submit(spec)
    if not args.wait:
        if args.quiet:
            print(job["id"])
        else:
            emit(args, job, ["id", "name", "state", "state_reason"])
        return 0
    silent = args.json or args.quiet
    if not silent:
        print(f"submitted {job['id']}", file=sys.stderr)
    job = client.wait(job["id"], on_change=None if silent else _progress, poll=args.poll)
    if args.quiet:
        print(job["id"])
    else:
        emit(args, job, ["id", "name", "state", "state_reason", "exit_code"])
    return 0 if job["state"] == "SUCCEEDED" else 1


def _inference_options(spec: dict, args) -> None:
    """--model, --dataset AS=REF and --output-dataset NAME[:PATH] over the spec's fields;
    --model or --output-dataset make it an inference job (the server checks the rest)."""
    if args.model:
        spec["model"] = args.model
    for item in args.dataset or []:
        name, sep, ref = item.partition("=")
        if not sep or not name or not ref:
            raise TorusError(f"--dataset {item!r}: give AS=<dataset>:<version>, e.g. INPUT=data:1")
        datasets = [d for d in spec.get("datasets") or [] if d.get("as") != name]
        spec["datasets"] = [*datasets, {"version": ref, "as": name}]
    if args.output_dataset:
        name, sep, path = args.output_dataset.partition(":")
        spec["output_dataset"] = {"name": name, **({"path": path} if sep else {})}
    if args.model or args.output_dataset:
        spec.setdefault("kind", "inference")


def cmd_jobs(client: Client, args) -> int:
    rows = client.jobs(
        state=args.state, project=args.project, user=args.user, label=args.label, limit=args.limit
    )
    if not args.json:  # (--json gives each job's expected_start as the API does)
        now = datetime.now(timezone.utc)
        rows = [{**row, "starts": starts_in(row.get("expected_start"), now=now)} for row in rows]
    emit(args, rows, JOB_COLUMNS)
    return 0


def starts_in(expected: dict | None, *, now: datetime) -> str:
    """A waiting job's expected start as `~12m (5m-30m)`, `cannot: <why>`, or `-`."""
    if not expected:
        return "-"
    if expected.get("cannot_start"):
        return f"cannot: {expected['cannot_start']}"
    if not expected.get("p50"):
        return "-"

    def away(field: str) -> str:
        seconds = (datetime.fromisoformat(expected[field]) - now).total_seconds()
        minutes = max(0.0, seconds) / 60
        if minutes < 90:
            return f"{max(1, round(minutes))}m"
        if minutes < 48 * 60:
            return f"{round(minutes / 60)}h"
        return f"{round(minutes / 1440)}d"

    return f"~{away('p50')} ({away('p10')}-{away('p90')})"


def cmd_show(client: Client, args) -> int:
    job = client.job(args.id)
    if args.json:
        print(json.dumps(job, indent=2))
        return 0
    fields = [
        "id",
        "name",
        "project_slug",
        "user",
        "state",
        "state_reason",
        "cluster",
        "partition",
        "gpus",
        "cpus",
        "memory_mb",
        "restart_count",
        "latest_checkpoint",
        "exit_code",
        "created_at",
        "started_at",
        "finished_at",
    ]
    for field in fields:
        print(f"{field:<18} {job.get(field) if job.get(field) is not None else '-'}")
    if job.get("expected_start"):
        now = datetime.now(timezone.utc)
        print(f"{'expected_start':<18} {starts_in(job['expected_start'], now=now)}")
        if job["expected_start"].get("basis"):
            print(f"{'estimate_basis':<18} {job['expected_start']['basis']}")
    print("\nattempts")
    print(table(job["attempts"], ["number", "state", "backend_id", "nodes", "exit_code", "reason"]))
    print("\ntimeline")
    print(table(job["events"], ["created_at", "from_state", "to_state", "reason"]))
    return 0


def cmd_cancel(client: Client, args) -> int:
    emit(args, client.cancel(args.id), ["id", "state", "cancel_requested"])
    return 0


def cmd_restart(client: Client, args) -> int:
    emit(args, client.restart(args.id), ["id", "state", "state_reason"])
    return 0


def cmd_logs(client: Client, args) -> int:
    if args.id == "search":  # torus logs search "text" --project P
        return _logs_search(client, args)
    stream = "stderr" if args.stderr else "stdout"
    if args.follow:
        return _follow(client, args, stream)
    offset = 0
    while True:
        chunk = client.logs(
            args.id, attempt=args.attempt, stream=stream, offset=offset, limit=1024 * 1024
        )
        sys.stdout.write(chunk["data"])
        if chunk["next_offset"] == offset:
            return 0
        offset = chunk["next_offset"]


def _follow(client: Client, args, stream: str) -> int:
    """Live over the websocket: the last --tail lines, then new ones until the job has ended
    and its output is shipped. State changes and skipped lines are told on stderr."""

    def tell(message: dict) -> None:
        if message["type"] == "state":
            reason = f" ({message['reason']})" if message.get("reason") else ""
            sys.stderr.write(f"torus: job {args.id} is {message['state']}{reason}\n")
        elif message["type"] == "skipped":
            sys.stderr.write(
                f"torus: {message['count']} lines came faster than the live view shows; "
                f"`torus logs {args.id}` has them all\n"
            )

    for line in client.follow_logs(args.id, streams=(stream,), tail=args.tail, on_message=tell):
        sys.stdout.write(line["message"] + "\n")
        sys.stdout.flush()
    final = client.job(args.id)["state"]
    return 0 if final == "SUCCEEDED" else 1


def cmd_metrics(client: Client, args) -> int:
    series = client.metrics(args.id, names=args.name)
    if args.json:
        print(json.dumps(series, indent=2))
        return 0
    rows = [
        {
            "name": name,
            "points": len(points),
            "last_step": points[-1]["step"],
            "last_value": points[-1]["value"],
        }
        for name, points in series.items()
        if points
    ]
    print(table(rows, ["name", "points", "last_step", "last_value"]))
    return 0


def _logs_search(client: Client, args) -> int:
    project = resolve_project(client, args.project) if args.project else None
    result = client.search_logs(args.text or "", project=project, size=args.size)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for hit in result["hits"]:
        print(f"{hit['timestamp']}  {hit['job'][:8]}  {hit['stream']:<6} {hit['message']}")
    print(f"({result['total']} matching lines)", file=sys.stderr)
    return 0


def cmd_usage(client: Client, args) -> int:
    rows = client.usage(period=args.period, group_by=args.group_by)
    columns = [
        "period",
        "tenant",
        *([args.group_by] if args.group_by in ("project", "user") else []),
        "gpu_hours",
        "cpu_hours",
        "jobs",
    ]
    emit(args, rows, columns)
    return 0


def cmd_clusters(client: Client, args) -> int:
    emit(args, client.clusters(), ["name", "backend", "healthy", "last_reconciled_at"])
    if not args.json:
        try:
            builds = client.cluster_builds()
        except TorusError as exc:
            if exc.status != 404:  # a portal from before the background builds has none
                raise
            builds = []
        for build in builds:
            print(build_line(build))
    return 0


def build_line(build: dict) -> str:
    """`kubernetes: building, step 1 of 3 (build binaries), 4 min so far`"""
    if build["state"] == "waiting":
        return f"{build['name']}: waiting for the builds before it"
    where = f"step {build['step']} of {build['steps']} ({build['step_name']})"
    if build["state"] == "failed":
        line = f"{build['name']}: FAILED at {where}"
        return line + (f": {build['error']}" if build.get("error") else "")
    minutes = 0
    if build.get("started"):  # "...Z": Python before 3.11 reads only "+00:00"
        started = datetime.fromisoformat(build["started"].replace("Z", "+00:00"))
        minutes = int((datetime.now(timezone.utc) - started).total_seconds() // 60)
    return f"{build['name']}: building, {where}, {minutes} min so far"


def cmd_nodes(client: Client, args) -> int:
    rows = client.nodes(cluster=args.cluster)
    for row in rows:
        row["gpus"] = sum(sum(kinds.values()) for kinds in row["accelerators"].values())
    emit(args, rows, ["cluster", "name", "state", "cpus", "memory_mb", "gpus", "reason"])
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("submit", help="submit a job spec (YAML or JSON file, - for stdin)")
    p.add_argument("file")
    p.add_argument("--project", help="project id or slug (overrides the spec)")
    p.add_argument("--name", help="job name (overrides the spec)")
    p.add_argument(
        "--model", help="batch inference: model version (name:N, name@alias or id) to read"
    )
    p.add_argument(
        "--dataset",
        action="append",
        metavar="AS=REF",
        help="a dataset version to read at $TORUS_DATASET_<AS> (repeatable), e.g. INPUT=data:1",
    )
    p.add_argument(
        "--output-dataset",
        metavar="NAME[:PATH]",
        help="batch inference: <job dir>/PATH (default predictions) becomes a version of NAME",
    )
    p.add_argument(
        "--wait", action="store_true", help="wait for the end; exit 1 unless it succeeded"
    )
    p.add_argument("--poll", type=float, default=1.0, help="seconds between checks")
    p.add_argument(
        "-q", "--quiet", action="store_true", help="print only the job id (JOB=$(torus submit ...))"
    )
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser("jobs", help="list jobs")
    p.add_argument("--state", help="e.g. RUNNING or PENDING,QUEUED")
    p.add_argument("--project", help="project id or slug")
    p.add_argument("--user")
    p.add_argument("--label", help="key=value")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_jobs)
    for name, func, text in [
        ("show", cmd_show, "a job with its attempts and timeline"),
        ("cancel", cmd_cancel, "cancel a job"),
        ("restart", cmd_restart, "run a finished job again"),
    ]:
        p = sub.add_parser(name, help=text)
        p.add_argument("id")
        p.set_defaults(func=func)
    p = sub.add_parser("logs", help="a job's output, or `logs search TEXT` across jobs")
    p.add_argument("id", help="a job id, or the word search")
    p.add_argument("text", nargs="?", help="with search: the text to find")
    p.add_argument("--project", help="with search: a project id or slug")
    p.add_argument("--size", type=int, default=50, help="with search: lines to show")
    p.add_argument("--attempt", type=int)
    p.add_argument("--stderr", action="store_true")
    p.add_argument(
        "-f", "--follow", action="store_true", help="live, until the job ends (websocket)"
    )
    p.add_argument("--tail", type=int, default=200, help="with -f: earlier lines shown first")
    p.set_defaults(func=cmd_logs)
    p = sub.add_parser("metrics", help="a job's training metrics")
    p.add_argument("id")
    p.add_argument("--name", action="append", help="only this metric (repeatable)")
    p.set_defaults(func=cmd_metrics)
    p = sub.add_parser("usage", help="GPU and CPU hours per period")
    p.add_argument("--period", help="YYYY-MM (default: this month)")
    p.add_argument(
        "--group-by", default="project", choices=["tenant", "project", "user", "project_user"]
    )
    p.set_defaults(func=cmd_usage)
    sub.add_parser("clusters", help="clusters").set_defaults(func=cmd_clusters)
    p = sub.add_parser("nodes", help="nodes with their accelerators")
    p.add_argument("--cluster")
    p.set_defaults(func=cmd_nodes)
