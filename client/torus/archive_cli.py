"""`torus projects|datasets|models|deployments archive|restore` and the lists' `--archived`.
Archiving asks for the project's slug or the thing's name, typed (or `--confirm NAME` in a
script); the API judges it, and its refusals (400 at `confirm`, 409) are printed as it says
them. Nothing here deletes: an archived thing is read-only and hidden, restorable by an admin."""

from __future__ import annotations

import argparse
import sys

from torus.client import Client
from torus.errors import TorusError
from torus.output import emit

# kind -> the `torus` command group that holds it
GROUPS = {
    "project": "projects",
    "dataset": "datasets",
    "model": "models",
    "deployment": "deployments",
}


def key_of(kind: str) -> str:
    """What confirms an archive: a project's slug, the others' name."""
    return "slug" if kind == "project" else "name"


def typed_confirmation(kind: str, name: str) -> str:
    """The name typed at a terminal; a script (stdin not a terminal) must pass --confirm."""
    key = key_of(kind)
    if not sys.stdin.isatty():
        raise TorusError(
            f"archiving {kind} {name} needs its {key} typed, and standard input is not a "
            f"terminal: pass --confirm {name}"
        )
    sys.stderr.write(
        f"Archive {kind} {name}? It becomes read-only and hidden from lists, its running work "
        f"is stopped; an admin can restore it.\nType its {key} ({name}) to confirm: "
    )
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise TorusError("not confirmed (end of input): nothing archived")
    return line.strip()


def cmd_archive(client: Client, args) -> int:
    kind = args.archive_kind
    found = client.locate(kind, args.name, project=args.project)
    name = found[key_of(kind)]
    typed = args.confirm if args.confirm is not None else typed_confirmation(kind, name)
    done = client.archive(kind, found["id"], confirm=typed)
    if args.json:
        emit(args, done)
    else:
        restore = f"torus {GROUPS[kind]} restore {name}"
        print(f"archived {kind} {name}; an admin restores it with: {restore}")
    return 0


def cmd_restore(client: Client, args) -> int:
    kind = args.archive_kind
    found = client.locate(kind, args.name, project=args.project, archived_first=True)
    done = client.restore(kind, found["id"])
    if args.json:
        emit(args, done)
    else:
        print(f"restored {kind} {found[key_of(kind)]}")
    return 0


def add_parsers(sub, kind: str) -> None:
    """`archive` and `restore` in the subcommands `sub` of the group of `kind`."""
    key = key_of(kind)
    archive = sub.add_parser(
        "archive", help=f"archive a {kind}: read-only, hidden, restorable by an admin"
    )
    archive.add_argument("name", help=f"the {kind}'s {key} (or id)")
    archive.add_argument(
        "--confirm",
        metavar=key.upper(),
        help=f"the {kind}'s {key}, for scripts (else it is asked for at the terminal)",
    )
    restore = sub.add_parser("restore", help=f"restore an archived {kind} (an admin)")
    restore.add_argument("name", help=f"the {kind}'s {key} (or id)")
    for parser, func in ((archive, cmd_archive), (restore, cmd_restore)):
        if kind == "project":
            parser.set_defaults(project=None)
        else:
            parser.add_argument("--project", help="project slug or id (when names repeat)")
        json_flag(parser)
        parser.set_defaults(func=func, archive_kind=kind)


def json_flag(parser) -> None:
    """--json after the subcommand too; its absence there keeps `torus --json ...`."""
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="JSON output for scripts"
    )


def add_archived_flag(parser, default=False) -> None:
    parser.add_argument(
        "--archived",
        action="store_true",
        default=default,
        help="only the archived ones (hidden by default)",
    )


def columns(args, base: list[str]) -> list[str]:
    """A list's columns, with when each was archived under --archived."""
    return [*base, "archived_at"] if getattr(args, "archived", False) else base
