"""Checks of a node that runs several tenants' jobs (docs/security.md, "Shared nodes").

`proc_problem` reads the mount options of a procfs mount: without `hidepid=invisible` (2) or
`ptraceable` (4), a job sees every other user's processes and their command lines. The portal's
host is a node here, so `manage.py check --deploy` runs it on /proc (settings.TORUS_PROC_PATH);
on a site with many nodes, `manage.py torus_doctor [--proc PATH]` runs it on each."""

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core import checks

PROC_CHECK_ID = "torus.W033"  # issue 33
HIDDEN = {"2", "invisible", "4", "ptraceable"}  # other users' processes are not listed


@dataclass(frozen=True)
class ProcMount:
    mount_point: str
    options: dict[str, str]  # the superblock's (hidepid, gid, subset) and the mount's own

    @property
    def hidepid(self) -> str:
        return self.options.get("hidepid", "off")

    @property
    def hides_processes(self) -> bool:
        return self.hidepid in HIDDEN


def _unescape(field: str) -> str:
    r"""mountinfo escapes space, tab, newline and backslash as \ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def proc_mount(*, proc: str) -> ProcMount | None:
    """The procfs mounted at `proc` (the last one mounted there), or None when `proc` is not
    a procfs mount point."""
    target = str(Path(proc).resolve())
    found = None
    try:
        text = (Path(proc) / "self" / "mountinfo").read_text()
    except FileNotFoundError:  # not a procfs: the machine's own says what is mounted there
        text = Path("/proc/self/mountinfo").read_text()
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 6 or len(rest) < 3 or rest[0] != "proc":
            continue
        if _unescape(fields[4]) != target:
            continue
        options = {}
        for option in (*fields[5].split(","), *rest[2].split(",")):
            key, _, value = option.partition("=")
            options[key] = value
        found = ProcMount(mount_point=target, options=options)
    return found


def proc_problem(*, proc: str) -> str | None:
    """Why `proc` shows one user's processes to another, or None when it does not."""
    try:
        mount = proc_mount(proc=proc)
    except OSError as exc:
        return f"cannot read the mount options of {proc}: {exc}"
    if mount is None:
        return f"{proc} is not a procfs mount point"
    if mount.hides_processes:
        return None
    if mount.hidepid in ("1", "noaccess"):
        return (
            f"{proc} is mounted with hidepid={mount.hidepid}: other users' command lines are "
            "hidden but their processes (and owners) are listed"
        )
    return f"{proc} is mounted without hidepid: every job sees other users' command lines"


@checks.register(checks.Tags.security, deploy=True)
def check_proc_hidepid(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    proc = getattr(settings, "TORUS_PROC_PATH", "/proc")
    problem = proc_problem(proc=proc)
    if problem is None:
        return []
    return [
        checks.Warning(
            problem,
            hint=(
                "On every node that runs jobs: mount -o remount,hidepid=invisible,gid=<group of "
                "the monitoring agents> /proc (and in /etc/fstab); docs/security.md, Shared nodes."
            ),
            id=PROC_CHECK_ID,
        )
    ]
