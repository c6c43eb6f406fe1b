"""Datasets from Python and the `torus datasets` subcommands: upload (resumable, with a
progress bar), ls, versions, diff, download, verify (docs/datasets.md)."""

from __future__ import annotations

import hashlib
import os
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from torus import archive_cli
from torus.archive_cli import add_archived_flag, columns, json_flag
from torus.client import Client
from torus.errors import TorusError
from torus.output import emit
from torus.transfer import READ_BYTES, Progress, extract

# One PUT carries up to this much of a file (streamed from disk in READ_BYTES pieces): an
# interrupted request loses nothing, the next one starts at the offset the server stored.
PART_BYTES = 256 * 1024 * 1024
RETRIES = 5

DATASET_COLUMNS = ["name", "project_slug", "latest_version", "description", "created_at"]
VERSION_COLUMNS = ["number", "state", "file_count", "size_bytes", "committed_at", "created_by"]


# -- the SDK side ------------------------------------------------------------------------------


def parse_ref(ref: str) -> tuple[str, int]:
    """'NAME:3' -> ('NAME', 3)."""
    name, sep, number = ref.rpartition(":")
    if not sep or not number.isdigit() or not name:
        raise TorusError(f"{ref!r}: name a version as NAME:NUMBER (e.g. images:2)")
    return name, int(number)


def find_dataset(
    client: Client, name: str, *, project: str | None = None, archived: bool = False
) -> dict | None:
    return client.find("dataset", name, project=project, archived=archived)


def get_dataset(client: Client, name: str, *, project: str | None = None) -> dict:
    dataset = find_dataset(client, name, project=project)
    if dataset is None:
        raise TorusError(f"no dataset named {name!r}", status=404, code="not_found")
    return dataset


def _base(dataset: dict, number: int) -> str:
    return f"/api/v1/datasets/{dataset['id']}/versions/{number}"


def _local_files(directory: Path) -> list[tuple[str, Path, int]]:
    if not directory.is_dir():
        raise TorusError(f"{directory} is not a directory")
    files = []

    def refuse(exc: OSError):
        raise TorusError(f"cannot read {exc.filename}: {exc.strerror}")

    for root, dirs, names in os.walk(directory, onerror=refuse):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            if path.is_file():
                files.append((path.relative_to(directory).as_posix(), path, path.stat().st_size))
    return files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(READ_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _file_part(path: Path, offset: int, length: int, advance) -> Iterator[bytes]:
    with path.open("rb") as handle:
        handle.seek(offset)
        left = length
        while left > 0:
            chunk = handle.read(min(READ_BYTES, left))
            if not chunk:
                raise TorusError(f"{path} shrank while it was uploaded", code="local_file_changed")
            left -= len(chunk)
            advance(len(chunk))
            yield chunk


def upload_file(
    client: Client, base: str, rel: str, path: Path, size: int, progress: Progress
) -> dict:
    """Upload one file, continuing from what the server holds; returns its manifest line.
    A file the server has complete with the same content is not sent again."""
    tries, start = 0, progress.done
    while True:
        state = client.request("GET", f"{base}/upload/", params={"path": rel})
        if state["complete"]:
            if state["file"]["size"] == size and state["file"]["sha256"] == _sha256(path):
                progress.update(start + size)
                return state["file"]
            state["offset"] = 0  # changed since: replace it
        offset = state["offset"]
        progress.update(start + offset)
        try:
            while True:
                length = min(PART_BYTES, size - offset)
                with client.stream(
                    "PUT",
                    f"{base}/upload/",
                    params={"path": rel, "offset": offset, "total": size},
                    content=_file_part(path, offset, length, progress.advance),
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Length": str(length),
                    },
                ) as response:
                    response.read()
                    result = response.json()
                if result["complete"]:
                    return result["file"]
                offset = result["offset"]
        except TorusError as exc:
            # the connection dropped, or the server's copy moved on: ask where it stands
            resumable = exc.status in (0, 409, 502, 503, 504) and exc.code in (
                "error",
                "offset_mismatch",
                "unavailable",
            )
            tries += 1
            if not resumable or tries > RETRIES:
                raise
            time.sleep(min(2**tries, 30) * 0.25)


def upload_directory(
    client: Client,
    directory: str | Path,
    *,
    name: str,
    project: str | None = None,
    description: str = "",
    notes: str = "",
    commit: bool = True,
    show_progress: bool | None = None,
    storage: str | None = None,
) -> dict:
    """Upload a directory as a new version of dataset `name` (made if missing) and commit it.
    Re-running after an interruption continues the same open version where it stopped.
    `storage`: "posix" or "s3" for a new version (default: the platform's)."""
    files = _local_files(Path(directory))
    dataset = find_dataset(client, name, project=project)
    if dataset is None:
        dataset = client.request(
            "POST",
            "/api/v1/datasets/",
            json={"project": _project_for_create(client, project), "name": name}
            | ({"description": description} if description else {}),
        )
    versions = client.request(
        "GET", f"/api/v1/datasets/{dataset['id']}/versions/", params={"state": "open"}
    )["results"]
    if versions:
        version = versions[-1]  # an interrupted upload: continue it
    else:
        version = client.request(
            "POST",
            f"/api/v1/datasets/{dataset['id']}/versions/",
            json={"notes": notes} | ({"storage_kind": storage} if storage else {}),
        )
    base = _base(dataset, version["number"])
    total = sum(size for _, _, size in files)
    progress = Progress(f"{name}:{version['number']}", total, enabled=show_progress)
    try:
        for rel, path, size in files:
            try:
                upload_file(client, base, rel, path, size, progress)
            except OSError as exc:
                raise TorusError(f"cannot read {path}: {exc.strerror or exc}") from exc
    finally:
        progress.close()
    if not commit:
        return client.request("GET", f"{base}/")
    return client.request("POST", f"{base}/commit/")


def _project_for_create(client: Client, project: str | None) -> str:
    from torus.jobs_cli import resolve_project

    if project:
        return resolve_project(client, project)
    projects = client.projects()
    if len(projects) != 1:
        raise TorusError("say which project the new dataset belongs to (--project)")
    return projects[0]["id"]


def download(
    client: Client,
    ref: str,
    out: str | Path,
    *,
    file: str | None = None,
    project: str | None = None,
    show_progress: bool | None = None,
) -> Path:
    """Download one file of a version (checked against its sha256), or the whole version
    extracted under the directory `out`. Returns what was written."""
    name, number = parse_ref(ref)
    dataset = get_dataset(client, name, project=project)
    base = _base(dataset, number)
    out = Path(out)
    if file is not None:
        target = out / Path(file).name if out.is_dir() else out
        with client.stream(
            "GET", f"{base}/download/", params={"path": file}, follow_redirects=True
        ) as response:
            size = int(response.headers.get("Content-Length", 0)) or None
            # the API's answer carries the sha256 (an S3 file: its redirect, not the store)
            first = response.history[0] if response.history else response
            expected = first.headers.get("ETag", "").strip('"')
            progress = Progress(file, size, enabled=show_progress)
            digest = hashlib.sha256()
            partial = target.with_name(target.name + ".part")
            try:
                with partial.open("wb") as handle:
                    for chunk in response.iter_bytes(READ_BYTES):
                        handle.write(chunk)
                        digest.update(chunk)
                        progress.advance(len(chunk))
            except OSError as exc:
                raise TorusError(f"cannot write {target}: {exc.strerror}") from exc
            finally:
                progress.close()
        if expected and digest.hexdigest() != expected:
            partial.unlink(missing_ok=True)
            raise TorusError(f"{file}: the downloaded bytes do not match the manifest's sha256")
        partial.replace(target)
        return target
    out.mkdir(parents=True, exist_ok=True)
    with client.stream("GET", f"{base}/archive/") as response:
        size = int(response.headers.get("Content-Length", 0)) or None
        progress = Progress(ref, size, enabled=show_progress)
        reader = _Reader(response.iter_bytes(READ_BYTES), progress.advance)
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                extract(tar, out)
        except (tarfile.TarError, OSError) as exc:
            raise TorusError(f"cannot extract the archive into {out}: {exc}") from exc
        finally:
            progress.close()
    return out / f"{name}-v{number}"


class _Reader:
    """A file-like view of a stream of chunks (for tarfile's streaming mode)."""

    def __init__(self, chunks: Iterator[bytes], on_bytes: Callable[[int], None]):
        self._chunks, self._buffer, self._on_bytes = chunks, bytearray(), on_bytes

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._on_bytes(len(chunk))
            self._buffer += chunk
        size = len(self._buffer) if size < 0 else size
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out


# -- the CLI side ------------------------------------------------------------------------------


def cmd_upload(client: Client, args) -> None:
    version = upload_directory(
        client,
        args.directory,
        name=args.name,
        project=args.project,
        description=args.description or "",
        notes=args.notes or "",
        commit=not args.no_commit,
        show_progress=False if args.json else None,
        storage=args.storage,
    )
    if args.json:
        emit(args, version)
        return
    what = "committed" if version["state"] == "committed" else "left open"
    print(
        f"{version['ref']} {what}: {version['file_count']} files, {version['size_bytes']} bytes"
        + (f", manifest {version['manifest_sha256'][:12]}" if version["manifest_sha256"] else "")
    )


def cmd_ls(client: Client, args) -> None:
    rows = client.datasets(project=args.project, archived=args.archived)
    emit(args, rows, columns(args, DATASET_COLUMNS))


def cmd_versions(client: Client, args) -> None:
    dataset = get_dataset(client, args.name, project=args.project)
    rows = list(client.paginate(f"/api/v1/datasets/{dataset['id']}/versions/"))
    emit(args, rows, VERSION_COLUMNS)


def cmd_diff(client: Client, args) -> int:
    (name_a, a), (name_b, b) = parse_ref(args.old), parse_ref(args.new)
    if name_a != name_b:
        raise TorusError("compare two versions of one dataset (NAME:1 NAME:2)")
    dataset = get_dataset(client, name_a, project=args.project)
    result = client.request(
        "GET", f"/api/v1/datasets/{dataset['id']}/compare/", params={"a": a, "b": b}
    )
    if args.json:
        emit(args, result)
        return 0
    for mark, key in (("+", "added"), ("-", "removed"), ("~", "changed")):
        for path in result[key]:
            print(f"{mark} {path}")
    print(
        f"{len(result['added'])} added, {len(result['removed'])} removed, "
        f"{len(result['changed'])} changed, {result['unchanged']} unchanged"
    )
    return 0


def cmd_download(client: Client, args) -> None:
    written = download(
        client,
        args.ref,
        args.output,
        file=args.file,
        project=args.project,
        show_progress=False if args.json else None,
    )
    if args.json:
        emit(args, {"path": str(written)})
    else:
        print(f"wrote {written}")


def cmd_verify(client: Client, args) -> int:
    name, number = parse_ref(args.ref)
    dataset = get_dataset(client, name, project=args.project)
    result = client.request("POST", f"{_base(dataset, number)}/verify/")
    if args.json:
        emit(args, result)
    else:
        for key in ("missing", "changed", "unexpected"):
            for path in result[key]:
                print(f"{key}: {path}")
        print(f"{args.ref}: {'ok' if result['ok'] else 'DIFFERS'} ({result['checked']} files)")
    return 0 if result["ok"] else 1


def add_parsers(sub) -> None:
    datasets = sub.add_parser("datasets", help="versioned datasets").add_subparsers(
        dest="datasets_command", required=True
    )

    def common(parser):
        parser.add_argument("--project", help="project id or slug")
        json_flag(parser)
        return parser

    upload = common(datasets.add_parser("upload", help="upload a directory as a new version"))
    upload.add_argument("directory")
    upload.add_argument("--name", required=True, help="the dataset (made if missing)")
    upload.add_argument("--description")
    upload.add_argument("--notes", help="notes of the new version")
    upload.add_argument("--no-commit", action="store_true", help="leave the version open")
    upload.add_argument(
        "--storage",
        choices=["posix", "s3"],
        help="where a new version is stored (default: the platform's)",
    )
    upload.set_defaults(func=cmd_upload)

    ls = common(datasets.add_parser("ls", help="list datasets"))
    add_archived_flag(ls)
    ls.set_defaults(func=cmd_ls)
    archive_cli.add_parsers(datasets, "dataset")

    versions = common(datasets.add_parser("versions", help="a dataset's versions"))
    versions.add_argument("name")
    versions.set_defaults(func=cmd_versions)

    diff = common(datasets.add_parser("diff", help="files added, removed, changed"))
    diff.add_argument("old", help="NAME:N")
    diff.add_argument("new", help="NAME:M")
    diff.set_defaults(func=cmd_diff)

    down = common(datasets.add_parser("download", help="a file, or a whole version"))
    down.add_argument("ref", help="NAME:N")
    down.add_argument("--file", help="one file's path in the version")
    down.add_argument("-o", "--output", required=True, help="file or directory to write")
    down.set_defaults(func=cmd_download)

    verify = common(datasets.add_parser("verify", help="check stored files against the manifest"))
    verify.add_argument("ref", help="NAME:N")
    verify.set_defaults(func=cmd_verify)
