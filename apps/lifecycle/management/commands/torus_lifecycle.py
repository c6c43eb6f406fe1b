"""The operator's archive, restore and purge (docs/operations.md, "Purge and retention"):

    manage.py torus_lifecycle archive tenant <slug> --confirm <slug>
    manage.py torus_lifecycle restore tenant <slug>
    manage.py torus_lifecycle purge <kind> <id>     runs it, printing each step
    manage.py torus_lifecycle purges                lists purges
    manage.py torus_lifecycle resume <purge id>     resumes one left running

Errors are one line (CommandError), never a traceback."""

import uuid

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.core.exceptions import Conflict
from apps.lifecycle.models import Kind, Purge
from apps.lifecycle.purge import purge_request, purge_run
from apps.tenancy.lifecycle import archive, restore
from apps.tenancy.models import Tenant


def _message(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        if hasattr(exc, "message_dict"):
            return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        return " ".join(exc.messages)
    return str(exc) or exc.__class__.__name__


class Command(BaseCommand):
    help = "Archive or restore a tenant; purge archived things past their retention."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        archive = sub.add_parser("archive", help="archive a tenant")
        archive.add_argument("what", choices=["tenant"])
        archive.add_argument("slug")
        archive.add_argument("--confirm", required=True, help="the tenant's slug again")
        restore = sub.add_parser("restore", help="restore an archived tenant")
        restore.add_argument("what", choices=["tenant"])
        restore.add_argument("slug")
        purge = sub.add_parser("purge", help="purge an archived thing (runs it)")
        purge.add_argument("kind", choices=[k.value for k in Kind])
        purge.add_argument("id")
        sub.add_parser("purges", help="list purges")
        resume = sub.add_parser("resume", help="resume a purge left running")
        resume.add_argument("purge_id")

    def handle(self, *args, **options):
        try:
            getattr(self, f"do_{options['action']}")(options)
        except CommandError:
            raise
        except (Conflict, ValidationError, LookupError, ValueError) as exc:
            raise CommandError(_message(exc)) from None
        except Exception as exc:  # a step's failure: one line, the purge stays resumable
            raise CommandError(f"{exc.__class__.__name__}: {_message(exc)}") from None

    def _tenant(self, slug: str) -> Tenant:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"no tenant {slug!r}")
        return tenant

    def do_archive(self, options):
        tenant = self._tenant(options["slug"])
        archive(actor=None, thing=tenant, confirm=options["confirm"])
        self.stdout.write(f"archived tenant {tenant.slug}")

    def do_restore(self, options):
        tenant = self._tenant(options["slug"])
        restore(actor=None, thing=tenant)
        self.stdout.write(f"restored tenant {tenant.slug}")

    def _run(self, purge: Purge) -> None:
        def report(step: str, state: str) -> None:
            self.stdout.write(f"  {step}: {state}")

        self.stdout.write(f"purge {purge.pk} of {purge.kind} {purge.target_repr}")
        try:
            purge = purge_run(purge=purge, report=report)
        except Exception as exc:
            raise CommandError(
                f"purge {purge.pk} stopped ({_message(exc)}); it stays running: "
                f"resume it with `torus_lifecycle resume {purge.pk}`"
            ) from None
        self.stdout.write(f"purge {purge.pk}: {purge.state}")

    def do_purge(self, options):
        try:
            target_id = uuid.UUID(options["id"])
        except ValueError:
            raise CommandError(f"{options['id']!r} is not an id") from None
        self._run(purge_request(kind=options["kind"], target_id=target_id, requested_by=None))

    def do_resume(self, options):
        try:
            purge = Purge.objects.filter(pk=uuid.UUID(options["purge_id"])).first()
        except ValueError:
            purge = None
        if purge is None:
            raise CommandError(f"no purge {options['purge_id']!r}")
        self._run(purge)

    def do_purges(self, options):
        for purge in Purge.objects.order_by("-created_at"):
            finished = f"{purge.finished_at:%Y-%m-%d %H:%M}" if purge.finished_at else "-"
            steps = ",".join(purge.steps_done) or "-"
            line = f"{purge.pk}  {purge.state:7}  {purge.kind:10}  {purge.target_repr}  "
            line += f"runs={purge.runs}  finished={finished}  steps={steps}"
            if purge.last_error:
                line += f"  error={purge.last_error.splitlines()[0][:200]}"
            self.stdout.write(line)
