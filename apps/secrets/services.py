"""Writes of project secrets: set (create or replace), delete, the dispatcher's read, and
re-encryption under the newest key. Every write and every read by a dispatch is audited by
name and version; a value never reaches the audit log, a log line or an exception."""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.compute.backends.base import SubmitRejected
from apps.core.actor import Actor
from apps.secrets import crypto
from apps.secrets.models import ProjectSecret, SecretUse
from apps.secrets.rules import name_problem, value_problem
from apps.tenancy.audit import audit_event, audit_record
from apps.tenancy.models import AuditEvent, Project
from apps.tenancy.policies import authorize


def secret_set(
    *, actor: Actor, project: Project, name: str, value: str, ip: str | None = None
) -> tuple[ProjectSecret, bool]:
    """Create or replace the project's secret `name`; (secret, created). A replacement
    bumps the version."""
    authorize(
        actor, resource="secret", action="update", tenant_id=project.tenant_id, target=project
    )
    errors = {}
    if problem := name_problem(name):
        errors["name"] = [problem]
    if problem := value_problem(value):
        errors["value"] = [problem]
    if errors:
        raise ValidationError(errors)
    ciphertext = crypto.encrypt(value)
    with transaction.atomic():
        secret = (
            ProjectSecret.objects.select_for_update().filter(project=project, name=name).first()
        )
        created = secret is None
        if created:
            secret = ProjectSecret(tenant_id=project.tenant_id, project=project, name=name)
            before = None
        else:
            before = secret.version
            secret.version += 1
        secret.ciphertext, secret.updated_by = ciphertext, actor.user
        secret.save()
        audit_record(
            actor=actor,
            tenant_id=project.tenant_id,
            action="secret.set",
            target=secret,
            changes={
                "project": [None, project.slug],
                "name": [None, name],
                "version": [before, secret.version],
            },
            ip=ip,
        )
    return secret, created


def secret_delete(*, actor: Actor, secret: ProjectSecret, ip: str | None = None) -> None:
    authorize(
        actor,
        resource="secret",
        action="delete",
        tenant_id=secret.tenant_id,
        target=secret.project,
    )
    with transaction.atomic():
        audit_record(
            actor=actor,
            tenant_id=secret.tenant_id,
            action="secret.delete",
            target=secret,
            changes={
                "project": [secret.project.slug, None],
                "name": [secret.name, None],
                "version": [secret.version, None],
            },
            ip=ip,
        )
        secret.delete()


def spec_secret_refs(spec: dict) -> dict[str, str]:
    """{variable: secret name} a job's spec asks for: `secrets: [NAME]` (the variable has the
    secret's name) and env values `{secret: NAME}`."""
    refs = {name: name for name in spec.get("secrets") or []}
    for variable, value in (spec.get("env") or {}).items():
        if isinstance(value, dict):
            refs[variable] = value["secret"]
    return refs


def missing_secrets(*, project: Project, names: set[str]) -> set[str]:
    """The names among `names` that the project has no secret for (one query)."""
    found = ProjectSecret.objects.filter(project=project, name__in=names).values_list(
        "name", flat=True
    )
    return set(names) - set(found)


def secrets_for_attempt(*, attempt) -> dict[str, str]:
    """{variable: value} of the secrets an attempt's job names, decrypted for its dispatch:
    a record per secret (SecretUse: what the shipper masks) and an audit event "read by
    dispatch" each. A secret deleted since the job was submitted, or one no key of now
    opens, refuses the attempt (SubmitRejected: it fails with that reason)."""
    job = attempt.job
    refs = spec_secret_refs(job.spec)
    if not refs:
        return {}
    rows = {
        row.name: row
        for row in ProjectSecret.objects.filter(
            project_id=job.project_id, name__in=set(refs.values())
        )
    }
    gone = sorted(set(refs.values()) - set(rows))
    if gone:
        raise SubmitRejected(
            f"secret {', '.join(gone)} of project {job.project.slug} no longer exists (deleted"
            " after the job was submitted); set it again and restart the job"
        )
    values: dict[str, str] = {}
    for variable, name in refs.items():
        try:
            values[variable] = crypto.decrypt(rows[name].ciphertext)
        except crypto.InvalidToken:
            raise SubmitRejected(
                f"secret {name} of project {job.project.slug} cannot be decrypted with the"
                " platform's keys (TORUS_SECRETS_KEYS); an operator must restore the key"
            ) from None
    now = timezone.now()
    with transaction.atomic():
        SecretUse.objects.filter(attempt_id=attempt.pk).delete()  # a second try of a dispatch
        SecretUse.objects.bulk_create(
            SecretUse(
                attempt_id=attempt.pk,
                name=row.name,
                version=row.version,
                ciphertext=row.ciphertext,
                created_at=now,
            )
            for row in rows.values()
        )
        AuditEvent.objects.bulk_create(
            audit_event(
                actor=None,
                tenant_id=job.tenant_id,
                action="secret.read",
                target=row,
                changes={
                    "by": [None, "dispatch"],
                    "name": [None, row.name],
                    "version": [None, row.version],
                    "job": [None, str(job.pk)],
                    "attempt": [None, attempt.number],
                },
            )
            for row in rows.values()
        )
    return values


def secrets_reencrypt() -> int:
    """Every stored value (the projects' and the attempts' copies) under the newest key; the
    number of values rewritten. Each row in its own short transaction, locked."""
    count = 0
    for model in (ProjectSecret, SecretUse):
        for pk in model.objects.values_list("pk", flat=True).iterator():
            with transaction.atomic():
                row = model.objects.select_for_update().filter(pk=pk).first()
                if row is None:
                    continue
                rotated = crypto.reencrypt(row.ciphertext)
                model.objects.filter(pk=pk).update(ciphertext=rotated)
                count += 1
    return count
