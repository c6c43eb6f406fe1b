"""Where a version's files live (its storage, their keys) and the seal that makes a version
ready: manifest computed, prefix sealed, audited, webhooks told. Once a version is ready its
prefix is sealed and its manifest rows never change."""

import hashlib

from django.utils import timezone

from apps.core.actor import Actor
from apps.datasets.storage import storage_for
from apps.registry.deliveries import deliveries_enqueue, version_event
from apps.registry.models import ModelVersion, VersionState, WebhookEvent
from apps.tenancy.audit import audit_record


def version_storage(version: ModelVersion):
    return storage_for(version.storage)


def file_key(version: ModelVersion, path: str) -> str:
    return f"{version.key_prefix}/{path}"


def _manifest_sha(rows: list[tuple[str, int, str]]) -> str:
    digest = hashlib.sha256()
    for path, size, sha in sorted(rows):
        digest.update(f"{path}\t{size}\t{sha}\n".encode())
    return digest.hexdigest()


def version_finish(version: ModelVersion, *, actor: Actor | None, user=None) -> ModelVersion:
    """Seal a version whose files are stored and whose rows carry size and sha256; mark it
    ready and tell the webhooks (the caller holds the version's row lock)."""
    rows = list(version.files.values_list("path", "size", "sha256"))
    version.file_count = len(rows)
    version.size_bytes = sum(size for _, size, _ in rows)
    version.manifest_sha256 = _manifest_sha(rows)
    version.state = VersionState.READY
    version.ready_at = timezone.now()
    version.error = ""
    version.save()
    version_storage(version).seal(prefix=version.key_prefix)
    audit_record(
        actor=actor,
        user=user,
        tenant_id=version.tenant_id,
        action="model_version.ready",
        target=version,
        changes={"files": version.file_count, "bytes": version.size_bytes},
    )
    deliveries_enqueue(
        tenant_id=version.tenant_id,
        event=WebhookEvent.VERSION_CREATED,
        payload=lambda: version_event(version),
        model=version.model,
    )
    return version
