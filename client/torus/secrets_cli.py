"""`torus secrets ls|set|rm`: a project's secrets (docs/sdk.md). A value goes in from standard
input, a hidden prompt or a file, never from the command line (argv shows in `ps`), and never
comes back out: the API has no route that returns one."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

from torus.client import Client, check_secret_name
from torus.errors import TorusError
from torus.output import emit

MAX_VALUE = 64 * 1024  # bytes of UTF-8, as the API counts them


def _updated_by(row: dict) -> dict:
    who = row.get("updated_by")
    if isinstance(who, dict):  # a user object: show the username
        row = {**row, "updated_by": who.get("username") or who.get("id")}
    return row


def cmd_ls(client: Client, args) -> int:
    rows = [_updated_by(row) for row in client.secrets(args.project)]
    emit(args, rows, ["name", "version", "updated_at", "updated_by"])
    return 0


def read_value(args) -> str:
    """The value from --from-file (exact), a hidden prompt (a terminal) or piped stdin (one
    trailing newline dropped, as `echo` adds it)."""
    if args.from_file:
        path = Path(args.from_file)
        try:
            if path.stat().st_size > MAX_VALUE:
                raise TorusError(f"{path} is larger than a secret may be (64 KiB)")
            data = path.read_bytes()
        except OSError as exc:
            raise TorusError(f"cannot read {path}: {exc.strerror}") from exc
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TorusError(f"{path} is not UTF-8 text (a secret is text)") from exc
    elif sys.stdin.isatty():
        value = getpass.getpass(f"value of {args.name} (not shown): ")
    else:
        value = sys.stdin.read()
        value = value[:-2] if value.endswith("\r\n") else value.removesuffix("\n")
    if not value:
        raise TorusError("no value given (pipe it in, type it when asked, or --from-file)")
    return value


def cmd_set(client: Client, args) -> int:
    project = client.project_id(args.project)  # a wrong project or name before the value
    check_secret_name(args.name)
    secret = client.set_secret(project, args.name, read_value(args))
    if args.json:
        emit(args, _updated_by(secret))
    else:
        done = "created" if secret.get("version") == 1 else "replaced"
        print(f"{done} {secret['name']} (version {secret.get('version')}) in {args.project}")
    return 0


def cmd_rm(client: Client, args) -> int:
    client.delete_secret(args.project, args.name)
    if not args.json:
        print(f"deleted {args.name} from {args.project}")
    return 0


def add_parsers(sub) -> None:
    secrets = sub.add_parser("secrets", help="a project's secrets (values go in, never out)")
    ssub = secrets.add_subparsers(dest="secrets_command", required=True)

    def with_project(parser):
        parser.add_argument("--project", required=True, help="project slug or id")
        return parser

    with_project(ssub.add_parser("ls", help="names, versions, who set them")).set_defaults(
        func=cmd_ls
    )
    set_ = with_project(
        ssub.add_parser(
            "set",
            help="create or replace a secret",
            description="The value is read from standard input when piped, else asked for "
            "(not echoed), or read from --from-file. It is never an argument: command lines "
            "show in `ps`.",
        )
    )
    set_.add_argument("name", help="a variable name: HF_TOKEN, WANDB_API_KEY, ...")
    set_.add_argument("--from-file", metavar="PATH", help="the value is this file's text")
    set_.set_defaults(func=cmd_set)
    rm = with_project(ssub.add_parser("rm", help="delete a secret"))
    rm.add_argument("name")
    rm.set_defaults(func=cmd_rm)
