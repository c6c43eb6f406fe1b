"""The node checks of apps/compute/doctor.py on this machine: run it on each node that runs
jobs (exit status 1 when one fails). It also lists what the platform's periodic passes could
not handle (apps/core/passes.py): each open failure with its pass, item, count and error."""

from django.core.management.base import BaseCommand, CommandError

from apps.compute.doctor import PROC_CHECK_ID, proc_mount, proc_problem
from apps.core.passes import failure_totals, failures_open


class Command(BaseCommand):
    help = (
        "Check this node for what shows one tenant's processes to another (/proc hidepid), "
        "and list the items the periodic passes could not handle."
    )

    def add_arguments(self, parser):
        parser.add_argument("--proc", default="/proc", help="the procfs mount to check")
        parser.add_argument(
            "--passes-only", action="store_true", help="list the passes' failures only"
        )

    def handle(self, *args, **options):
        self._passes()
        if options["passes_only"]:
            return
        proc = options["proc"]
        problem = proc_problem(proc=proc)
        if problem is not None:
            raise CommandError(f"{PROC_CHECK_ID}: {problem}")
        mount = proc_mount(proc=proc)
        gid = mount.options.get("gid")
        seen_by = f"group {gid} sees every process" if gid else "no gid=: only root sees all"
        self.stdout.write(f"ok: {proc} hidepid={mount.hidepid} ({seen_by})")

    def _passes(self) -> None:
        try:  # (a node without the platform's database has nothing to list)
            rows, totals = failures_open(), failure_totals()
        except Exception as exc:
            self.stdout.write(f"passes: not read here ({type(exc).__name__}: {exc})")
            return
        if not rows:
            self.stdout.write("ok: no pass has an item it cannot handle")
        for row in rows:
            self.stdout.write(
                f"failing: pass {row.pass_name} item {row.item_key}: {row.count} in a row"
                f" since {row.first_at:%Y-%m-%d %H:%M:%S}Z, last {row.last_at:%H:%M:%S}Z:"
                f" {row.error.splitlines()[0] if row.error else ''}"
            )
        for name, total in sorted(totals.items()):
            self.stdout.write(
                f"pass {name}: {total['failures']} failures counted, {total['failing']} items"
                " failing now"
            )
