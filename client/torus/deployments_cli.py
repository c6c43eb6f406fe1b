"""Model deployments from Python and the CLI: `torus deploy`, `torus deployments
ls|show|events|logs|scale|rm`, and `torus chat` streaming through the deployment's gateway
path (docs/serving.md)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator

import httpx

from torus import archive_cli
from torus.client import Client
from torus.errors import TorusError
from torus.output import emit, table

COLUMNS = ["name", "state", "ref", "version", "replicas", "gateway"]
SLUG_BAD = re.compile(r"[^a-z0-9-]+")


# -- the SDK side ------------------------------------------------------------------------------


def _project_id(client: Client, ref: str) -> str:
    from torus.jobs_cli import resolve_project

    return resolve_project(client, ref)


def find_deployment(
    client: Client, ref: str, *, project: str | None = None, archived: bool = False
) -> dict:
    """A deployment by id or by name (in `project` when several projects have one)."""
    found = client.find("deployment", ref, project=project, archived=archived)
    if found is None:
        raise TorusError(f"no deployment named {ref!r}", status=404)
    return found


def default_name(model_ref: str) -> str:
    name = re.split(r"[:@]", model_ref, maxsplit=1)[0].lower()
    return SLUG_BAD.sub("-", name).strip("-")[:63] or "deployment"


def deploy(
    client: Client,
    model: str,
    *,
    replicas: int = 1,
    name: str | None = None,
    project: str | None = None,
    **options,
) -> dict:
    """Deploy 'MODEL:N', 'MODEL@ALIAS' (followed when it moves) or 'MODEL' (its latest
    version, pinned). The project: `project`, else the model's."""
    from torus.models_cli import find_model, parse_ref

    model_name, which = parse_ref(model)
    found = find_model(client, model_name, project=project)
    if which is None:
        if not found["latest_version"]:
            raise TorusError(f"model {model_name!r} has no versions", status=404)
        ref = f"{model_name}:{found['latest_version']}"
    elif which.startswith("@"):
        ref = f"{model_name}{which}"
    else:
        ref = f"{model_name}:{which}"
    body = {
        "project": found["project"],
        "name": name or default_name(model_name),
        "model": ref,
        "replicas": replicas,
        **{key: value for key, value in options.items() if value is not None},
    }
    same = _deployed_already(client, body, model_name=model_name, which=which)
    if same is not None:
        return same
    return client.request("POST", "/api/v1/deployments/", json=body)


def _deployed_already(client: Client, body: dict, *, model_name: str, which: str | None):
    """The project's live deployment of that name when it serves the same reference (the
    same alias followed, or the same version pinned): deploying again changes nothing, as
    `kubectl apply` would not. Another of that name is left to the API's 400."""
    for shown in client.deployments(project=body["project"]):
        if shown["name"] != body["name"] or shown["model_name"] != model_name:
            continue
        if which and which.startswith("@"):
            same = shown["follow_alias"] == which[1:]
        else:
            same = not shown["follow_alias"] and body["model"].endswith(
                f":{shown['version']['number']}"
            )
        return {**shown, "deployed_already": True} if same else None
    return None


def wait_ready(client: Client, deployment_id: str, *, timeout: float = 600, progress=None):
    """Poll until READY (or FAILED: an error); `progress(deployment)` on every change."""
    deadline = time.monotonic() + timeout
    seen = None
    while True:
        shown = client.request("GET", f"/api/v1/deployments/{deployment_id}/")
        if progress and (shown["state"], shown["state_reason"]) != seen:
            seen = (shown["state"], shown["state_reason"])
            progress(shown)
        if shown["state"] == "READY":
            return shown
        if shown["state"] in ("FAILED", "STOPPED"):
            raise TorusError(
                f"deployment {shown['name']} is {shown['state']}: {shown['state_reason']}"
            )
        if time.monotonic() > deadline:
            raise TorusError(f"timed out waiting for {shown['name']} ({shown['state']})")
        time.sleep(1)


def chat_stream(
    client: Client, deployment_id: str, messages: list[dict], *, max_tokens: int | None = None
) -> Iterator[str]:
    """The assistant's reply, piece by piece, through the gateway
    (/serve/<id>/v1/chat/completions, server-sent events)."""
    body: dict = {"messages": messages, "stream": True}
    if max_tokens:
        body["max_tokens"] = max_tokens
    path = f"/serve/{deployment_id}/v1/chat/completions"
    with client.stream(
        "POST",
        path,
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
    ) as response:
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                event = json.loads(data)
            except ValueError:
                continue
            if "error" in event:
                raise TorusError(str(event["error"].get("message", event["error"])))
            for choice in event.get("choices", []):
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    yield piece


# -- the commands -------------------------------------------------------------------------------


def _row(d: dict) -> dict:
    r = d["replicas"]
    return {
        **d,
        "version": d["version"]["number"],
        "replicas": f"{r['ready']}/{r['desired']} ({r['min']}-{r['max']})",
    }


def cmd_deploy(client: Client, args) -> int:
    made = deploy(
        client,
        args.model,
        replicas=args.replicas,
        name=args.name,
        project=args.project,
        replicas_min=args.min,
        replicas_max=args.max,
        cpus=args.cpus,
        memory=args.memory,
        gpus=args.gpus,
        slots=args.slots,
        context=args.context,
        kv_cache_type=args.kv_cache_type,
        scale_to_zero_after_s=args.scale_to_zero_after,
    )
    if made.get("deployed_already"):
        print(f"[{made['name']}] deployed already, unchanged", file=sys.stderr, flush=True)
    if args.wait:

        def tell(d: dict) -> None:
            reason = f": {d['state_reason']}" if d["state_reason"] else ""
            print(f"[{d['name']}] {d['state']}{reason}", file=sys.stderr, flush=True)

        made = wait_ready(client, made["id"], timeout=args.timeout, progress=tell)
    emit(args, made if args.json else _row(made), COLUMNS)
    return 0


def cmd_ls(client: Client, args) -> int:
    rows = client.deployments(project=args.project, archived=args.archived)
    if args.json:
        emit(args, rows)
    else:
        print(table([_row(d) for d in rows], archive_cli.columns(args, COLUMNS)))
    return 0


def cmd_show(client: Client, args) -> int:
    found = find_deployment(client, args.name, project=args.project)
    if args.json:
        emit(args, found)
        return 0
    print(table([_row(found)], COLUMNS))
    replicas = client.request("GET", f"/api/v1/deployments/{found['id']}/replicas/")["results"]
    if replicas:
        print()
        print(table(replicas, ["id", "state", "version", "job", "job_state", "ready_at"]))
    return 0


def cmd_events(client: Client, args) -> int:
    found = find_deployment(client, args.name, project=args.project)
    rows = list(client.paginate(f"/api/v1/deployments/{found['id']}/events/"))
    emit(args, rows, ["created_at", "kind", "message"])
    return 0


def cmd_logs(client: Client, args) -> int:
    """The engine's output of a replica (its job's log): the first active one, or --replica."""
    found = find_deployment(client, args.name, project=args.project)
    path = f"/api/v1/deployments/{found['id']}/replicas/"
    replicas = client.request("GET", path, params={"all": "1"})["results"]
    if args.replica:
        replicas = [r for r in replicas if r["id"].startswith(args.replica)]
    else:
        active = [r for r in replicas if r["state"] in ("READY", "STARTING", "DRAINING")]
        replicas = active[:1] or replicas[-1:]
    if not replicas or not replicas[0]["job"]:
        raise TorusError(f"deployment {found['name']} has no replica with a job yet", status=404)
    job_id = replicas[0]["job"]
    stream = "stdout" if args.stdout else "stderr"  # the engine logs to stderr
    offset = 0
    while True:
        chunk = client.logs(job_id, stream=stream, offset=offset, limit=1024 * 1024)
        sys.stdout.write(chunk["data"])
        if chunk["next_offset"] == offset:
            return 0
        offset = chunk["next_offset"]


def cmd_scale(client: Client, args) -> int:
    found = find_deployment(client, args.name, project=args.project)
    body = {"replicas": args.replicas}
    if args.min is not None:
        body["replicas_min"] = args.min
    if args.max is not None:
        body["replicas_max"] = args.max
    changed = client.request("PATCH", f"/api/v1/deployments/{found['id']}/", json=body)
    emit(args, changed if args.json else _row(changed), COLUMNS)
    return 0


def cmd_rm(client: Client, args) -> int:
    found = find_deployment(client, args.name, project=args.project)
    client.request("DELETE", f"/api/v1/deployments/{found['id']}/")
    print(f"removed deployment {found['name']}", file=sys.stderr)
    return 0


def not_serving(deployment: dict) -> str | None:
    """Why a deployment cannot answer now (failed, or no replica ready), else None."""
    name, reason = deployment["name"], deployment.get("state_reason") or ""
    if deployment["state"] == "FAILED":
        return f"deployment {name} failed: {reason or 'no reason given'}"
    if not deployment["replicas"]["ready"]:
        state = f"{deployment['state']}: {reason}" if reason else deployment["state"]
        return f"deployment {name}: no replica ready ({state})"
    return None


def cmd_chat(client: Client, args) -> int:
    found = find_deployment(client, args.deployment, project=args.project)
    messages = [{"role": "user", "content": args.prompt}]
    pieces = []
    try:
        for piece in chat_stream(client, found["id"], messages, max_tokens=args.max_tokens):
            pieces.append(piece)
            if not args.json:
                sys.stdout.write(piece)
                sys.stdout.flush()
    except TorusError as exc:
        # the gateway holds a request while replicas start: past the client's timeout, say
        # where the deployment stands rather than "cannot reach Torus"
        if pieces or not isinstance(exc.__cause__, httpx.TimeoutException):
            raise
        shown = client.request("GET", f"/api/v1/deployments/{found['id']}/")
        raise TorusError(not_serving(shown) or str(exc)) from exc
    if args.json:
        emit(args, {"deployment": found["id"], "content": "".join(pieces)})
    else:
        sys.stdout.write("\n")
    return 0


def add_parsers(sub) -> None:
    deploy_p = sub.add_parser("deploy", help="serve a registered model: MODEL[:N|@ALIAS]")
    deploy_p.add_argument("model", help="MODEL:N, MODEL@ALIAS (followed) or MODEL (latest)")
    deploy_p.add_argument("--replicas", type=int, default=1)
    deploy_p.add_argument("--name", help="the deployment's name (default: the model's)")
    deploy_p.add_argument("--project", help="project slug or id (default: the model's)")
    deploy_p.add_argument("--min", type=int, help="fewest replicas autoscaling keeps")
    deploy_p.add_argument("--max", type=int, help="most replicas autoscaling starts")
    deploy_p.add_argument("--cpus", type=int)
    deploy_p.add_argument("--memory", help="per replica: '4G' or MiB")
    deploy_p.add_argument("--gpus", type=int)
    deploy_p.add_argument("--slots", type=int, help="parallel sequences per replica")
    deploy_p.add_argument("--context", type=int, help="tokens per slot")
    deploy_p.add_argument("--kv-cache-type", choices=["f16", "q8_0"])
    deploy_p.add_argument(
        "--scale-to-zero-after", type=int, metavar="SECONDS", help="idle time before zero"
    )
    deploy_p.add_argument("--wait", action="store_true", help="until READY")
    deploy_p.add_argument("--timeout", type=float, default=600)
    deploy_p.set_defaults(func=cmd_deploy)

    group = sub.add_parser("deployments", help="list, inspect, scale and remove deployments")
    dsub = group.add_subparsers(dest="deployments_command", required=True)
    ls = dsub.add_parser("ls", help="list deployments")
    ls.add_argument("--project")
    archive_cli.add_archived_flag(ls)
    ls.set_defaults(func=cmd_ls)
    archive_cli.add_parsers(dsub, "deployment")
    for name, func, text in (
        ("show", cmd_show, "a deployment and its replicas"),
        ("events", cmd_events, "what happened to it (scaling decisions with their figures)"),
        ("logs", cmd_logs, "a replica's engine output"),
        ("rm", cmd_rm, "remove one that never ran a replica (else: archive it)"),
    ):
        command = dsub.add_parser(name, help=text)
        command.add_argument("name", help="deployment name or id")
        command.add_argument("--project")
        command.set_defaults(func=func)
        if name == "logs":
            command.add_argument("--replica", help="a replica id (or its start)")
            command.add_argument("--stdout", action="store_true", help="stdout, not stderr")
    scale = dsub.add_parser("scale", help="set the replica count")
    scale.add_argument("name")
    scale.add_argument("replicas", type=int)
    scale.add_argument("--min", type=int)
    scale.add_argument("--max", type=int)
    scale.add_argument("--project")
    scale.set_defaults(func=cmd_scale)

    chat = sub.add_parser("chat", help="send a prompt to a deployment; the reply streams")
    chat.add_argument("deployment", help="deployment name or id")
    chat.add_argument("prompt")
    chat.add_argument("--max-tokens", type=int)
    chat.add_argument("--project")
    chat.set_defaults(func=cmd_chat)
