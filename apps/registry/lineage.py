"""Where the registry's API reads lineage from. Lineage is read from jobs' attempts, and jobs
sits above the registry: jobs' AppConfig.ready() registers its readers here
(apps/jobs/lineage.py), so the registry never imports jobs."""

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured

from apps.core.actor import Actor
from apps.registry.models import ModelVersion, RegisteredModel

_READERS: dict[str, Callable] = {}
NAMES = ("version", "versions", "dataset_version", "attempt")


def readers_register(**readers: Callable) -> None:
    """version(actor=, version=), versions(model), dataset_version(actor=, dataset_version=),
    attempt(actor=, attempt_id=): called once, from jobs' ready()."""
    unknown = set(readers) - set(NAMES)
    if unknown:
        raise ImproperlyConfigured(f"unknown lineage readers: {sorted(unknown)}")
    _READERS.update(readers)


def _reader(name: str) -> Callable:
    try:
        return _READERS[name]
    except KeyError:
        raise ImproperlyConfigured(
            f"no lineage reader {name!r}: apps.jobs registers them (INSTALLED_APPS)"
        ) from None


def version_lineage(*, actor: Actor, version: ModelVersion) -> dict:
    """From a version back: its job, attempts, metrics and dataset versions."""
    return _reader("version")(actor=actor, version=version)


def versions_for_lineage(model: RegisteredModel):
    """The model's versions, read as a lineage shows them."""
    return _reader("versions")(model)


def dataset_version_lineage(*, actor: Actor, dataset_version) -> dict:
    """From a dataset version forward: the jobs that read it, the model versions from it."""
    return _reader("dataset_version")(actor=actor, dataset_version=dataset_version)


def source_attempt(*, actor: Actor, attempt_id):
    """The job attempt a version is registered from, with its job, if the actor sees it."""
    return _reader("attempt")(actor=actor, attempt_id=attempt_id)
