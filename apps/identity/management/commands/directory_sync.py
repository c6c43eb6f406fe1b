"""Write the platform's groups and their members into the directory again (after the directory
was edited beside the platform, or restored from an older backup): apps/identity/services.py."""

from django.core.management.base import BaseCommand, CommandError

from apps.core.exceptions import DirectoryUnavailable
from apps.identity.services import IdentityError, directory_sync


class Command(BaseCommand):
    help = __doc__

    def handle(self, *args, **options):
        try:
            changed = directory_sync()
        except (DirectoryUnavailable, IdentityError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"directory: {len(changed)} groups rewritten {' '.join(changed)}".rstrip()
        )
