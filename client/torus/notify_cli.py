"""`torus notify ls|add|rm`: what you are told about jobs, and where (docs/notifications.md):
e-mail, a signed webhook, or a chat service's incoming webhook; for one job, a project, or
all of your own jobs."""

from __future__ import annotations

from torus.client import Client
from torus.errors import TorusError
from torus.output import emit

EVENTS = (
    "started", "succeeded", "failed", "restarting", "cancelled", "waiting_too_long", "stalled",
    "idle", "deploy_failing", "deploy_recovered",
)  # fmt: skip
CHANNELS = ("email", "webhook", "slack", "feishu", "dingtalk", "wecom", "inapp")


def _scope(row: dict) -> dict:
    where = f"job {row['job']}" if row.get("job") else None
    where = where or (f"project {row['project']}" if row.get("project") else "your jobs")
    failing = (
        f"since {row['failing_since']}: {row.get('last_error')}" if row.get("failing_since") else ""
    )
    return {**row, "scope": where, "events": ",".join(row["events"]), "failing": failing}


def cmd_ls(client: Client, args) -> int:
    rows = [_scope(row) for row in client.subscriptions()]
    emit(args, rows, ["id", "scope", "events", "channel", "address", "failing"])
    return 0


def cmd_add(client: Client, args) -> int:
    events = [e.strip() for e in args.events.split(",") if e.strip()]
    unknown = [e for e in events if e not in EVENTS]
    if unknown or not events:
        raise TorusError(f"unknown events {unknown or args.events!r}; known: {', '.join(EVENTS)}")
    if args.project and args.job:
        raise TorusError("name a job or a project, not both")
    project = client.project_id(args.project) if args.project else None
    row = client.subscribe(
        events=events, channel=args.channel, address=args.address, project=project, job=args.job
    )
    if args.json:
        emit(args, row)
        return 0
    print(f"subscribed {row['id']}: {_scope(row)['scope']}, {','.join(row['events'])}")
    if row.get("secret"):  # a webhook's signing secret: shown this once
        print(f"signing secret (shown once; X-Torus-Signature): {row['secret']}")
    return 0


def cmd_rm(client: Client, args) -> int:
    client.unsubscribe(args.id)
    if not args.json:
        print(f"removed {args.id}")
    return 0


def add_parsers(sub) -> None:
    notify = sub.add_parser("notify", help="what you are told about jobs, and where")
    nsub = notify.add_subparsers(dest="notify_command", required=True)
    nsub.add_parser("ls", help="your subscriptions").set_defaults(func=cmd_ls)
    add = nsub.add_parser(
        "add",
        help="subscribe to events",
        description="Events: " + ", ".join(EVENTS) + ". Without --project or --job: all of "
        "your own jobs.",
    )
    add.add_argument("--events", required=True, help="comma-separated: failed,succeeded,...")
    add.add_argument("--channel", choices=CHANNELS, default="email")
    add.add_argument(
        "address",
        nargs="?",
        default="",
        help="an e-mail address, or the webhook's https URL (none for inapp: the UI's bell)",
    )
    add.add_argument("--project", help="a project's jobs (slug or id)")
    add.add_argument("--job", help="one job (id)")
    add.set_defaults(func=cmd_add)
    rm = nsub.add_parser("rm", help="remove a subscription")
    rm.add_argument("id")
    rm.set_defaults(func=cmd_rm)
