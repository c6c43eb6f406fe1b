"""An open version's manifest: what it may take (still open, a valid path, no file where a
directory is), the line written for a stored file with the version's totals, and the digest
fixed at commit."""

import hashlib
from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db.models import F, Q

from apps.datasets.errors import DatasetConflict
from apps.datasets.models import DatasetFile, DatasetVersion, VersionState
from apps.datasets.paths import file_path_problem


def check_open(version: DatasetVersion) -> None:
    if version.state != VersionState.OPEN:
        raise DatasetConflict(
            f"Version {version.number} is committed: it cannot change.", code="version_committed"
        )


def checked_path(path) -> str:
    problem = file_path_problem(path)
    if problem:
        raise ValidationError({"path": [problem]})
    return path


def check_no_clash(version: DatasetVersion, path: str) -> None:
    """A file may not sit where another file's directory is, nor below another file."""
    parts = path.split("/")
    parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
    clash = (
        DatasetFile.objects.filter(version=version)
        .filter(Q(path__in=parents) | Q(path__startswith=path + "/"))
        .values_list("path", flat=True)
        .first()
    )
    if clash is not None:
        raise DatasetConflict(
            f"{path} clashes with {clash} (a file cannot also be a directory).",
            code="path_clash",
        )


def tenant_project(version: DatasetVersion) -> tuple:
    return version.dataset.tenant_id, version.dataset.project_id


def file_record(version: DatasetVersion, *, path: str, size: int, sha256: str) -> DatasetFile:
    """Add (or replace) a manifest line and keep the version's totals (row locked by caller)."""
    previous = DatasetFile.objects.filter(version=version, path=path).first()
    if previous is not None:
        DatasetVersion.objects.filter(pk=version.pk).update(
            size_bytes=F("size_bytes") - previous.size + size
        )
        previous.size, previous.sha256 = size, sha256
        previous.save(update_fields=["size", "sha256", "updated_at"])
        return previous
    DatasetVersion.objects.filter(pk=version.pk).update(
        size_bytes=F("size_bytes") + size, file_count=F("file_count") + 1
    )
    return DatasetFile.objects.create(version=version, path=path, size=size, sha256=sha256)


def manifest_digest(lines: Iterable[tuple[str, int, str]]) -> str:
    """sha256 of the sorted manifest, one 'path\\tsize\\tsha256\\n' line per file."""
    digest = hashlib.sha256()
    for path, size, sha256 in sorted(lines):
        digest.update(f"{path}\t{size}\t{sha256}\n".encode())
    return digest.hexdigest()
