"""Kinds of job that an app above jobs owns (serving: serve), as hooks it registers in its
AppConfig.ready(): jobs calls them at dispatch and never imports that app."""

from collections.abc import Callable
from dataclasses import dataclass

from apps.jobs.models import Job


@dataclass(frozen=True)
class KindHooks:
    # before the backend sees an attempt of the kind; raises SubmitRejected to refuse it
    prepare: Callable[..., None] | None = None
    # values the attempt gets as the submission's secrets (never its environment), by name
    secrets: Callable[..., dict[str, str]] | None = None


_HOOKS: dict[str, KindHooks] = {}


def kind_register(
    kind: str,
    *,
    prepare: Callable[..., None] | None = None,
    secrets: Callable[..., dict[str, str]] | None = None,
) -> None:
    """Register what dispatch calls for a job of `kind` (each called as hook(job=job))."""
    _HOOKS[kind] = KindHooks(prepare=prepare, secrets=secrets)


def kind_prepare(*, job: Job) -> None:
    """The kind's check and preparation before dispatch (none for a kind without hooks)."""
    hooks = _HOOKS.get(job.kind)
    if hooks is not None and hooks.prepare is not None:
        hooks.prepare(job=job)


def kind_secrets(*, job: Job) -> dict[str, str]:
    """The kind's secrets for the submission ({} for a kind without hooks)."""
    hooks = _HOOKS.get(job.kind)
    if hooks is None or hooks.secrets is None:
        return {}
    return hooks.secrets(job=job)
