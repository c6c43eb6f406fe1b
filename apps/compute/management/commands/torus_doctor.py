"""The node checks of apps/compute/doctor.py on this machine: run it on each node that runs
jobs (exit status 1 when one fails)."""

from django.core.management.base import BaseCommand, CommandError

from apps.compute.doctor import PROC_CHECK_ID, proc_mount, proc_problem


class Command(BaseCommand):
    help = "Check this node for what shows one tenant's processes to another (/proc hidepid)."

    def add_arguments(self, parser):
        parser.add_argument("--proc", default="/proc", help="the procfs mount to check")

    def handle(self, *args, **options):
        proc = options["proc"]
        problem = proc_problem(proc=proc)
        if problem is not None:
            raise CommandError(f"{PROC_CHECK_ID}: {problem}")
        mount = proc_mount(proc=proc)
        gid = mount.options.get("gid")
        seen_by = f"group {gid} sees every process" if gid else "no gid=: only root sees all"
        self.stdout.write(f"ok: {proc} hidepid={mount.hidepid} ({seen_by})")
