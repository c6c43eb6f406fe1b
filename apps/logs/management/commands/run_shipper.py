"""Run the log shipper (make up starts one beside the workers; start more for scale: they
share the shards by leases, apps/logs/shards.py)."""

import signal
import sys

from django.core.management.base import BaseCommand

from apps.logs.shipper import run


class Command(BaseCommand):
    help = "Tail every active job attempt's output into Elasticsearch."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, once, **options):
        # a clean stop gives the shard leases back at once instead of letting them expire
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        run(once=once)
