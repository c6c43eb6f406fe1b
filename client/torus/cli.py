"""The `torus` command line: tables for people, --json for scripts, no tracebacks."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta, timezone

from torus import (
    archive_cli,
    completion,
    datasets_cli,
    deployments_cli,
    jobs_cli,
    models_cli,
    notify_cli,
    profiles_cli,
    secrets_cli,
)
from torus.client import Client
from torus.errors import TorusError
from torus.output import emit


def cmd_whoami(client: Client, args) -> None:
    me = client.me()
    if args.json:
        emit(args, me)
        return
    print(f"{me['user']['username']} at {client.url}")
    for tenant in me["tenants"]:
        print(f"  {tenant['slug']:<20} {tenant['role']}")
    if me["token"]:
        mode = "read-only" if me["token"]["read_only"] else "read-write"
        print(f"  token: {me['token']['name']} ({mode})")


def cmd_projects(client: Client, args) -> None:
    rows = client.projects(tenant=args.tenant, archived=args.archived)
    emit(args, rows, archive_cli.columns(args, ["id", "slug", "name"]))


def cmd_tokens(client: Client, args) -> None:
    rows = client.tokens()
    for row in rows:
        row["user"] = row["user"]["username"]
    emit(args, rows, ["id", "name", "user", "prefix", "read_only", "active", "last_used_at"])


def cmd_token_create(client: Client, args) -> None:
    expires = None
    if args.expires_in_days is not None:
        expires = (datetime.now(timezone.utc) + timedelta(days=args.expires_in_days)).isoformat()
    token = client.create_token(name=args.name, read_only=args.read_only, expires_at=expires)
    if args.json:
        emit(args, token)
    else:
        print(token["token"])
        print(f"(token {token['id']}; shown once, store it now)", file=sys.stderr)


def cmd_token_revoke(client: Client, args) -> None:
    client.revoke_token(args.id)
    if not args.json:
        print(f"revoked {args.id}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torus", description="Torus AI compute platform CLI")
    parser.add_argument("--url", help="portal URL (default: $TORUS_URL or the config file)")
    parser.add_argument("--token", help="access token (default: $TORUS_TOKEN or the config file)")
    parser.add_argument(
        "--profile", help="a saved platform (default: $TORUS_PROFILE or the config's default)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("whoami", help="who you are, your tenants and roles").set_defaults(
        func=cmd_whoami
    )
    projects = sub.add_parser("projects", help="list, archive and restore projects")
    # `torus projects` alone lists them, as `torus projects ls` does
    projects.set_defaults(func=cmd_projects, tenant=None, archived=False)
    psub = projects.add_subparsers(dest="projects_command")
    for lister in (projects, psub.add_parser("ls", help="list projects")):
        lister.add_argument("--tenant", help="tenant slug or id", default=argparse.SUPPRESS)
        archive_cli.add_archived_flag(lister, default=argparse.SUPPRESS)
    archive_cli.add_parsers(psub, "project")
    sub.add_parser("tokens", help="list access tokens").set_defaults(func=cmd_tokens)
    token = sub.add_parser("token", help="create or revoke an access token")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="mint a token (printed once)")
    create.add_argument("name")
    create.add_argument("--read-only", action="store_true")
    create.add_argument("--expires-in-days", type=int)
    create.set_defaults(func=cmd_token_create)
    revoke = token_sub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    revoke.set_defaults(func=cmd_token_revoke)
    jobs_cli.add_parsers(sub)
    datasets_cli.add_parsers(sub)
    models_cli.add_parsers(sub)
    deployments_cli.add_parsers(sub)
    secrets_cli.add_parsers(sub)
    notify_cli.add_parsers(sub)
    profiles_cli.add_parsers(sub)
    completion.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "completion", False):
            sys.stdout.write(completion.script(parser, args.shell))
            return 0
        if not getattr(args, "needs_client", True):
            return args.func(args) or 0
        with Client(url=args.url, token=args.token, profile=args.profile) as client:
            return args.func(client, args) or 0
    except TorusError as exc:
        print(f"torus: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
