"""The model registry from Python and the `torus models` subcommands: ls, register, versions,
alias, lineage, download, compare (docs/registry.md)."""

from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path
from urllib.parse import quote

from torus import archive_cli
from torus.client import Client
from torus.errors import TorusError
from torus.output import emit, table
from torus.transfer import Progress, extract

# Under the API's default body limit (1 MiB): each PUT carries one chunk; a directory this
# small goes in one request with the version's metadata.
UPLOAD_CHUNK = 768 * 1024
SMALL_VERSION = 512 * 1024
VERSION_COLUMNS = ["number", "state", "stage", "aliases", "framework", "file_count", "created_at"]


# -- the SDK side ------------------------------------------------------------------------------


def _q(path: str) -> str:
    return quote(path, safe="/")


def find_model(
    client: Client, name: str, *, project: str | None = None, archived: bool = False
) -> dict:
    model = client.find("model", name, project=project, archived=archived)
    if model is None:
        raise TorusError(f"no model named {name!r}", status=404)
    return model


def _project_id(client: Client, ref: str) -> str:
    from torus.jobs_cli import resolve_project

    return resolve_project(client, ref)


def parse_ref(ref: str) -> tuple[str, str | None]:
    """'NAME:3' -> ('NAME', '3'); 'NAME@production' -> ('NAME', '@production'); 'NAME'."""
    if "@" in ref:
        name, alias = ref.rsplit("@", 1)
        return name, f"@{alias}"
    name, sep, number = ref.rpartition(":")
    if sep and number.isdigit():
        return name, number
    return ref, None


def resolve_version(client: Client, ref: str, *, project: str | None = None):
    """(model, version number) for 'NAME:N', 'NAME@alias' or 'NAME' (the latest)."""
    name, which = parse_ref(ref)
    model = find_model(client, name, project=project)
    if which is None:
        number = model["latest_version"]
    elif which.startswith("@"):
        number = model["aliases"].get(which[1:])
        if number is None:
            raise TorusError(f"model {name!r} has no alias {which[1:]!r}", status=404)
    else:
        number = int(which)
    if not number:
        raise TorusError(f"model {name!r} has no versions", status=404)
    return model, int(number)


def upload_file(client: Client, base: str, rel: str, source: Path, progress=None) -> int:
    """Upload one file in chunks, resuming where the server's copy ends after a refusal."""
    url = f"{base}/files/{_q(rel)}/"
    size = source.stat().st_size
    offset = client.request("GET", f"{base}/uploads/{_q(rel)}/")["size"]
    with source.open("rb") as handle:
        while True:
            handle.seek(offset)
            chunk = handle.read(UPLOAD_CHUNK)
            try:
                offset = client.request("PUT", url, params={"offset": offset}, content=chunk)[
                    "size"
                ]
            except TorusError as exc:
                if exc.status != 409:
                    raise
                offset = client.request("GET", f"{base}/uploads/{_q(rel)}/")["size"]
                continue
            if progress:
                progress(len(chunk))
            if offset >= size:
                return offset


def register(
    client: Client,
    *,
    name: str,
    path: str | None = None,
    server_path: str | None = None,
    project: str | None = None,
    alias: str | None = None,
    show_progress: bool | None = None,
    **fields,
) -> dict:
    """Register a new version of model `name` (made in `project` if it does not exist): the
    files of the local directory `path` uploaded, or the directory `server_path` in the
    project's tree copied in by the platform. Returns the version once it is ready."""
    try:
        model = find_model(client, name, project=project)
    except TorusError as exc:
        if exc.status != 404 or not project:
            raise
        model = client.request(
            "POST", "/api/v1/models/", json={"project": _project_id(client, project), "name": name}
        )
    body = {k: v for k, v in fields.items() if v is not None}
    if server_path:
        body["path"] = server_path
    files = []
    if path:
        root = Path(path)
        if not root.is_dir():
            raise TorusError(f"{path} is not a directory")
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        if not files:
            raise TorusError(f"{path} holds no files")
    versions_url = f"/api/v1/models/{model['id']}/versions/"
    if files and sum(p.stat().st_size for p in files) <= SMALL_VERSION and len(files) <= 64:
        parts = {f"file/{p.relative_to(root).as_posix()}": (p.name, p.read_bytes()) for p in files}
        version = client.post_multipart(
            versions_url, data={"metadata": json.dumps(body)}, files=parts
        )
        files = []
    else:
        version = client.request("POST", versions_url, json=body)
    base = f"/api/v1/models/{model['id']}/versions/{version['number']}"
    if files:
        total = sum(p.stat().st_size for p in files)
        bar = Progress(f"{name}:{version['number']}", total, enabled=show_progress)
        sent = 0

        def advance(n: int) -> None:
            nonlocal sent
            sent += n
            bar.update(sent)

        for file in files:
            upload_file(client, base, file.relative_to(root).as_posix(), file, advance)
        bar.close()
        version = client.request("POST", f"{base}/commit/")
    deadline = time.monotonic() + 600
    while version["state"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.5)
        version = client.request("GET", f"{base}/")
    if version["state"] == "failed":
        raise TorusError(f"registration failed: {version['error']}")
    if alias:
        client.request(
            "PUT",
            f"/api/v1/models/{model['id']}/aliases/{alias}/",
            json={"version": version["number"]},
        )
        version = client.request("GET", f"{base}/")
    return version


# -- the commands ------------------------------------------------------------------------------


def cmd_ls(client: Client, args) -> None:
    rows = client.models(project=args.project, archived=args.archived)
    for row in rows:
        row["aliases"] = [f"{k}={v}" for k, v in sorted(row["aliases"].items())]
    base = ["name", "project_slug", "latest_version", "aliases", "created_at"]
    emit(args, rows, archive_cli.columns(args, base))


def _metadata(args) -> dict:
    out = {}
    for key in ("metrics", "params", "tags"):
        raw = getattr(args, key)
        if raw:
            try:
                out[key] = json.loads(Path(raw[1:]).read_text() if raw.startswith("@") else raw)
            except (OSError, ValueError) as exc:
                raise TorusError(f"--{key}: not JSON (or @file of JSON): {exc}") from exc
    if args.card:
        try:
            out["card"] = Path(args.card).read_text()
        except OSError as exc:
            raise TorusError(f"--card: cannot read {args.card}: {exc.strerror}") from exc
    if args.dataset:
        out["dataset_versions"] = args.dataset
    if args.framework:
        out["framework"] = args.framework
    if args.description:
        out["description"] = args.description
    return out


def cmd_register(client: Client, args) -> None:
    if bool(args.path) == bool(args.server_path):
        raise TorusError("give --path DIR (upload) or --server-path DIR (in the project's tree)")
    version = register(
        client,
        name=args.name,
        path=args.path,
        server_path=args.server_path,
        project=args.project,
        alias=args.alias,
        show_progress=None if not args.json else False,
        **_metadata(args),
    )
    if args.json:
        emit(args, version)
    else:
        print(
            f"{args.name}:{version['number']} {version['state']}: {version['file_count']} files,"
            f" {version['size_bytes']} bytes, manifest {version['manifest_sha256'][:12]}"
        )


def cmd_versions(client: Client, args) -> None:
    model = find_model(client, args.name, project=args.project)
    rows = list(client.paginate(f"/api/v1/models/{model['id']}/versions/"))
    emit(args, rows, VERSION_COLUMNS)


def cmd_alias(client: Client, args) -> None:
    model = find_model(client, args.name, project=args.project)
    path = f"/api/v1/models/{model['id']}/aliases/{quote(args.alias, safe='')}/"
    row = client.request("PUT", path, json={"version": int(args.version)})
    if args.json:
        emit(args, row)
    else:
        print(f"{args.name}@{row['name']} -> {row['version']}")


def cmd_unalias(client: Client, args) -> None:
    model = find_model(client, args.name, project=args.project)
    client.request("DELETE", f"/api/v1/models/{model['id']}/aliases/{quote(args.alias, safe='')}/")
    if not args.json:
        print(f"{args.name}@{args.alias} removed")


def cmd_lineage(client: Client, args) -> None:
    model, number = resolve_version(client, args.ref, project=args.project)
    data = client.request("GET", f"/api/v1/models/{model['id']}/versions/{number}/lineage/")
    if args.json:
        emit(args, data)
        return
    print(
        f"{data['version']['ref']} ({data['version']['state']}, stage {data['version']['stage']})"
    )
    job = data["job"]
    if job:
        print(f"  job      {job['name']} {job['id']} {job['state']} by {job['user']}")
        for attempt in data["attempts"]:
            mark = " <- source" if attempt.get("source") else ""
            nodes = ",".join(attempt["nodes"]) or "-"
            print(f"  attempt  #{attempt['number']} {attempt['state']} on {nodes}{mark}")
        print(f"  logs     {job['logs']}")
    else:
        print("  job      - (registered by hand)")
    for dv in data["dataset_versions"]:
        print(f"  dataset  {dv['ref']} {dv['id']}")
    if data["metrics"]:
        print("  metrics  " + ", ".join(f"{k}={v:g}" for k, v in sorted(data["metrics"].items())))


def cmd_download(client: Client, args) -> None:
    model, number = resolve_version(client, args.ref, project=args.project)
    base = f"/api/v1/models/{model['id']}/versions/{number}"
    out = Path(args.output)
    if args.file:
        source, target = f"{base}/files/{_q(args.file)}/", out
    else:
        source = f"{base}/archive/"
        target = out if out.suffix == ".tar" else out.with_suffix(".tar")
    if target.parent and not target.parent.exists():
        target.parent.mkdir(parents=True)
    bar = Progress(f"{model['name']}:{number}", None, enabled=None if not args.json else False)
    partial = target.with_name(target.name + ".part")
    with partial.open("wb") as handle:
        written = client.download(source, handle, on_progress=bar.update)
    bar.close()
    os.replace(partial, target)
    if not args.file and args.extract:
        extract_archive(target, out.with_suffix("") if out.suffix == ".tar" else out)
        target.unlink()
    if args.json:
        emit(args, {"path": str(target), "bytes": written})
    else:
        print(f"{written} bytes -> {target if target.exists() else out}")


def extract_archive(archive: Path, into: Path) -> None:
    """Unpack regular files and directories only, each inside `into`."""
    with tarfile.open(archive) as tar:
        extract(tar, into)


def cmd_compare(client: Client, args) -> None:
    (name_a, a), (name_b, b) = parse_ref(args.a), parse_ref(args.b)
    if name_a != name_b:
        raise TorusError("compare two versions of one model (NAME:1 NAME:2)")
    model, a = resolve_version(client, args.a, project=args.project)
    _, b = resolve_version(client, args.b, project=args.project)
    data = client.request("GET", f"/api/v1/models/{model['id']}/compare/", params={"a": a, "b": b})
    if args.json:
        emit(args, data)
        return
    rows = [{"metric": k, **v} for k, v in data["metrics"].items()]
    print(table(rows, ["metric", "a", "b", "delta"]) if rows else "no metrics")
    rows = [
        {"param": k, "a": v["a"], "b": v["b"], "changed": "*" if v["changed"] else ""}
        for k, v in data["params"].items()
    ]
    if rows:
        print()
        print(table(rows, ["param", "a", "b", "changed"]))


def add_parsers(sub) -> None:
    models = sub.add_parser("models", help="the model registry")
    msub = models.add_subparsers(dest="models_command", required=True)

    def with_project(parser):
        parser.add_argument("--project", help="project slug or id (when names repeat)")
        return parser

    ls = with_project(msub.add_parser("ls", help="list models"))
    archive_cli.add_archived_flag(ls)
    ls.set_defaults(func=cmd_ls)
    archive_cli.add_parsers(msub, "model")

    reg = with_project(msub.add_parser("register", help="register a new version"))
    reg.add_argument("name")
    reg.add_argument("--path", help="a local directory: its files are uploaded")
    reg.add_argument("--server-path", help="a directory in the project's tree, copied in")
    reg.add_argument("--framework")
    reg.add_argument("--description")
    reg.add_argument("--metrics", help="JSON object (or @file)")
    reg.add_argument("--params", help="JSON object (or @file)")
    reg.add_argument("--tags", help="JSON object (or @file)")
    reg.add_argument("--card", help="a Markdown file: the model card")
    reg.add_argument("--dataset", action="append", help="NAME:N or id (repeatable)")
    reg.add_argument("--alias", help="point this alias at the new version")
    reg.set_defaults(func=cmd_register)

    versions = with_project(msub.add_parser("versions", help="list a model's versions"))
    versions.add_argument("name")
    versions.set_defaults(func=cmd_versions)

    alias = with_project(msub.add_parser("alias", help="point an alias at a version"))
    alias.add_argument("name")
    alias.add_argument("version", type=int)
    alias.add_argument("alias", help="production, staging or any name")
    alias.set_defaults(func=cmd_alias)

    unalias = with_project(msub.add_parser("unalias", help="remove an alias"))
    unalias.add_argument("name")
    unalias.add_argument("alias")
    unalias.set_defaults(func=cmd_unalias)

    lineage = with_project(msub.add_parser("lineage", help="job, attempts, data of a version"))
    lineage.add_argument("ref", help="NAME:N, NAME@alias or NAME (latest)")
    lineage.set_defaults(func=cmd_lineage)

    download = with_project(msub.add_parser("download", help="download a version"))
    download.add_argument("ref", help="NAME:N, NAME@alias or NAME (latest)")
    download.add_argument("-o", "--output", required=True, help="a .tar, or a directory with -x")
    download.add_argument("--file", help="only this file of the version")
    download.add_argument("-x", "--extract", action="store_true", help="unpack into OUTPUT")
    download.set_defaults(func=cmd_download)

    compare = with_project(msub.add_parser("compare", help="metrics and params side by side"))
    compare.add_argument("a", help="NAME:N")
    compare.add_argument("b", help="NAME:M")
    compare.set_defaults(func=cmd_compare)
