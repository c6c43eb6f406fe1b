"""Re-encrypt every project secret under the newest key of TORUS_SECRETS_KEYS (docs/security.md,
Job secrets: put the new key first, run this, then drop the old one)."""

from django.core.management.base import BaseCommand

from apps.secrets.services import secrets_reencrypt


class Command(BaseCommand):
    help = "Re-encrypt every project secret under the newest key of TORUS_SECRETS_KEYS."

    def handle(self, *args, **options):
        count = secrets_reencrypt()
        self.stdout.write(f"re-encrypted {count} value(s) under the newest key")
