"""Archive, restore and delete-without-history for every Archivable thing (tenant, project,
dataset, model, deployment): one set of rules, in the tenancy layer, with the apps above it
plugging in what only they know (docs/operations.md, "Archive, restore and purge"):

- `history_register(label, count)`: what counts as a thing's history (a project's jobs are
  the jobs app's to count). A thing with any history is archived, never deleted.
- `contains_register(label, children)`: live archivable things archived with it, at the same
  instant, and restored with it (a tenant's projects, a project's or a model's deployments).
- `stop_register(label, stop)`: the running work an archive stops (a project's jobs are
  cancelled, a deployment scaled to nothing), inside the archive's transaction.
- `restore_register(label, revive)`: what a restore starts again (a deployment).
- `purge_state_register(state)`: whether a purge has begun or ended for a thing (apps/lifecycle
  owns purges; a thing being purged, or purged, cannot be restored).

Labels are model labels ("tenancy.Project"), so this module imports no app above it.
"""

from collections.abc import Callable

from django.db import models, transaction
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from apps.core.actor import Actor
from apps.core.exceptions import Conflict
from apps.tenancy.audit import audit_record
from apps.tenancy.models import Project, Tenant

HistoryCount = Callable[[models.Model], int]
Stop = Callable[..., None]

PURGED = "The {kind} was purged; it cannot be restored."

_HISTORY: dict[str, list[tuple[str, HistoryCount]]] = {}
_STOP: dict[str, list[Stop]] = {}
_CONTAINS: dict[str, list[Callable[[models.Model], models.QuerySet]]] = {}
_RESTORE: dict[str, list[Callable[..., None]]] = {}
_PURGE_STATE: list[Callable[..., str | None]] = []


def history_register(label: str, what: str, count: HistoryCount) -> None:
    """`count(thing)` rows of `what` ("jobs", "versions") make `label`'s things history."""
    _HISTORY.setdefault(label, []).append((what, count))


def contains_register(label: str, children: Callable[[models.Model], models.QuerySet]) -> None:
    """`children(thing)`: a queryset of archivable things that go and come back with it."""
    _CONTAINS.setdefault(label, []).append(children)


def stop_register(label: str, stop: Stop) -> None:
    """`stop(thing=..., reason=...)` ends the running work of an archived `label` thing."""
    _STOP.setdefault(label, []).append(stop)


def restore_register(label: str, revive: Callable[..., None]) -> None:
    """`revive(thing=...)` undoes what `label`'s stop did where it can (a deployment is wanted
    again); jobs cancelled by the archive stay cancelled (restart them)."""
    _RESTORE.setdefault(label, []).append(revive)


def purge_state_register(state: Callable[..., str | None]) -> None:
    """`state(kind=..., pk=..., tenant_ids=...)`: "running", "done" or None, for a purge of
    that thing in one of those tenants (None: any tenant)."""
    _PURGE_STATE.append(state)


def kind_of(thing: models.Model) -> str:
    """The word the API and the audit log use: project, dataset, model, deployment, tenant."""
    name = thing._meta.model_name
    return "model" if name == "registeredmodel" else name


def confirm_name(thing: models.Model) -> str:
    """What a person types to confirm an archive: a tenant's or project's slug, else the name."""
    return thing.slug if isinstance(thing, Tenant | Project) else thing.name


def history(thing: models.Model) -> dict[str, int]:
    """{what: count} of the thing's history (nothing: it may be deleted)."""
    counts = {what: count(thing) for what, count in _HISTORY.get(thing._meta.label, [])}
    return {what: n for what, n in counts.items() if n}


def purge_state(*, kind: str, pk, tenant_ids=None) -> str | None:
    for state in _PURGE_STATE:
        found = state(kind=kind, pk=pk, tenant_ids=tenant_ids)
        if found:
            return found
    return None


def _locked(thing: models.Model) -> models.Model:
    return type(thing).objects.select_for_update().get(pk=thing.pk)


def _tenant_id(thing: models.Model):
    return thing.pk if isinstance(thing, Tenant) else thing.tenant_id


def _stop(thing: models.Model, *, reason: str) -> None:
    for stop in _STOP.get(thing._meta.label, []):
        stop(thing=thing, reason=reason)


def _with_contents(thing: models.Model, *, archived_at) -> list[models.Model]:
    """The thing and, depth first, what it contains that was archived at `archived_at` (None:
    the live ones), row-locked."""
    found = [thing]
    for children in _CONTAINS.get(thing._meta.label, []):
        for child in children(thing).select_for_update().filter(archived_at=archived_at):
            found += _with_contents(child, archived_at=archived_at)
    return found


def _mark(thing: models.Model, *, at, by) -> None:
    thing.archived_at, thing.archived_by = at, by
    thing.save(update_fields=["archived_at", "archived_by", "updated_at"])


@transaction.atomic
def archive(
    *, actor: Actor | None, thing: models.Model, confirm: str, ip: str | None = None
) -> models.Model:
    """Archive a thing: read-only, hidden from default lists, its running work stopped (which
    frees its quota), restorable until purged. A tenant's live projects are archived with it,
    at the same instant (so that restoring the tenant restores exactly those)."""
    thing = _locked(thing)
    kind = kind_of(thing)
    if thing.archived_at is not None:
        raise Conflict(f"The {kind} {confirm_name(thing)} is already archived.")
    if confirm != confirm_name(thing):
        raise ValidationError(
            {"confirm": [f"Type the {kind}'s name, {confirm_name(thing)!r}, to archive it."]}
        )
    now, user = timezone.now(), getattr(actor, "user", None)
    user = user if getattr(user, "pk", None) else None
    reason = f"{kind} {confirm_name(thing)} archived" + (f" by {user}" if user else "")
    for item in _with_contents(thing, archived_at=None):
        _mark(item, at=now, by=user)
        _stop(item, reason=reason)
    audit_record(
        actor=actor,
        tenant_id=_tenant_id(thing),
        action=f"{kind}.archive",
        target=thing,
        changes={"archived_at": [None, now.isoformat()]},
        ip=ip,
        user=None if actor else user,
    )
    return thing


@transaction.atomic
def restore(*, actor: Actor | None, thing: models.Model, ip: str | None = None) -> models.Model:
    """Bring an archived thing back (a tenant: with the projects archived with it). Refused
    while it is being purged or once it is."""
    thing = _locked(thing)
    kind = kind_of(thing)
    state = purge_state(kind=kind, pk=thing.pk)
    if state == "done":
        raise Conflict(PURGED.format(kind=kind))
    if state:
        raise Conflict(f"The {kind} {confirm_name(thing)} is being purged; it cannot be restored.")
    if thing.archived_at is None:
        raise Conflict(f"The {kind} {confirm_name(thing)} is not archived.")
    when = thing.archived_at
    for item in _with_contents(thing, archived_at=when):
        _mark(item, at=None, by=None)
        for revive in _RESTORE.get(item._meta.label, []):
            revive(thing=item)
    audit_record(
        actor=actor,
        tenant_id=_tenant_id(thing),
        action=f"{kind}.restore",
        target=thing,
        changes={"archived_at": [when.isoformat(), None]},
        ip=ip,
    )
    return thing


def delete_refusal(thing: models.Model) -> None:
    """Raise 409 when the thing has history: such a thing is archived, never deleted."""
    found = history(thing)
    if found:
        what = ", ".join(f"{n} {name}" for name, n in sorted(found.items()))
        raise Conflict(
            f"The {kind_of(thing)} {confirm_name(thing)} has history ({what}); archive it "
            "instead (POST .../archive/ with its name in `confirm`)."
        )


def archived_refusal(thing: models.Model) -> str | None:
    """Why a write to this thing is refused, or None: it, or what it is in (a version's dataset
    or model, their project; a thing outside any project: its tenant), is archived. What an
    archive takes with it (a tenant's projects, a project's deployments) is archived itself."""
    if getattr(thing, "archived_at", None) is not None:
        return f"The {kind_of(thing)} {confirm_name(thing)} is archived (restore it first)."
    if isinstance(thing, Project | Tenant):
        return None
    for parent in ("dataset", "model", "project"):
        if getattr(thing, f"{parent}_id", None) is not None:
            return archived_refusal(getattr(thing, parent))
    if getattr(thing, "tenant_id", None) is not None:
        return archived_refusal(thing.tenant)
    return None


def _tenant_projects(tenant: Tenant) -> models.QuerySet:
    return Project.objects.filter(tenant=tenant)


contains_register("tenancy.Tenant", _tenant_projects)
