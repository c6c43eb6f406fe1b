"""A Slurm job's rendezvous port (apps/compute/backends/launcher.sh) comes from a band no
service of the platform listens on: job 259 once met the kube-scheduler on 20259."""

import re
import subprocess
from pathlib import Path

from scripts.devstack import PORTAL_PORTS

ROOT = Path(__file__).resolve().parents[2]


def rendezvous_ports() -> range:
    text = (ROOT / "apps/compute/backends/launcher.sh").read_text()
    base, span = re.search(r"\$\(\((\d+) \+ SLURM_JOB_ID % (\d+)\)\)", text).groups()
    return range(int(base), int(base) + int(span))


def service_ports() -> set[int]:
    """Every default port the platform's services and scripts name (PORT:-N)."""
    found = subprocess.run(
        ["grep", "-rhoE", r"PORT:-[0-9]+", "platform", "scripts", ".ci"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {int(match.split("-")[1]) for match in found.split()}


def test_a_jobs_rendezvous_port_is_no_service_port_and_no_portal_port():
    jobs = rendezvous_ports()
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert jobs.stop <= ephemeral  # no outgoing connection's local port
    services = service_ports()
    assert 20259 in services  # (the kube-scheduler's: what the grep is expected to find)
    assert not services & set(jobs)
    assert not set(PORTAL_PORTS) & set(jobs)
    assert not services & set(PORTAL_PORTS)
