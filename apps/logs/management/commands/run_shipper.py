"""Run the log shipper (make up starts one beside the workers)."""

from django.core.management.base import BaseCommand, CommandError

from apps.logs.shipper import run


class Command(BaseCommand):
    help = "Tail every active job attempt's output into Elasticsearch."

    def add_arguments(self, parser):
        parser.add_argument("--shard", type=int, default=0, help="this instance's number")
        parser.add_argument("--shards", type=int, default=1, help="how many instances run")
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, shard, shards, once, **options):
        if not 0 <= shard < shards:
            raise CommandError("--shard must be in [0, --shards)")
        run(shard=shard, shards=shards, once=once)
