"""scripts/devstack.py: the process table scripts/portal reads, the one free_port(), a child
process started, waited for and stopped, and no import of it from apps/ (no services needed)."""

import subprocess
import sys
import time
from pathlib import Path

from scripts import devstack

ROOT = Path(__file__).resolve().parents[2]


def portal_table(*args: str) -> list[tuple[str, str]]:
    out = subprocess.run(
        [sys.executable, "-m", "scripts.devstack", "portal-table", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [tuple(line.split("\t")) for line in out.stdout.splitlines()]


def test_portal_table_one_of_each():
    rows = portal_table(
        *[
            "--scale",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            "8000",
            "--var",
            "/v",
            "--concurrency",
            "2",
        ]
    )
    assert [name for name, _ in rows] == ["web", "worker", "beat", "shipper", "kubewatch"]
    commands = dict(rows)
    bin_ = ROOT / ".venv" / "bin"
    assert commands["web"] == (
        f"{bin_}/uvicorn config.asgi:application --host 127.0.0.1 --no-access-log --port 8000"
    )
    assert commands["worker"] == (
        f"{bin_}/celery -A config worker --loglevel INFO --concurrency 2 --hostname worker@%h"
    )
    assert commands["beat"] == (
        f"{bin_}/celery -A config beat --loglevel INFO --schedule /v/run/beat/celerybeat-schedule"
    )
    assert commands["shipper"] == f"{bin_}/python manage.py run_shipper"
    assert commands["kubewatch"] == f"{bin_}/python manage.py kube_watch"


def test_portal_table_two_of_each_behind_the_proxy():
    rows = portal_table(
        *[
            "--scale",
            "2",
            "--host",
            "0.0.0.0",
            "--port",
            "9000",
            "--var",
            "/v",
            "--concurrency",
            "3",
        ]
    )
    names = [name for name, _ in rows]
    assert names == [
        "web", "worker", "beat", "shipper", "web2", "worker2", "beat2", "shipper2",
        "proxy", "kubewatch",
    ]  # fmt: skip
    commands = dict(rows)
    assert commands["web2"].endswith(
        "--host 0.0.0.0 --no-access-log --port 9002 --proxy-headers --forwarded-allow-ips 127.0.0.1"
    )
    assert "--port 9001 " in commands["web"]
    assert commands["worker2"].endswith("--concurrency 3 --hostname worker2@%h")
    assert commands["beat2"].endswith("/v/run/beat/celerybeat-schedule2")
    assert commands["proxy"] == "haproxy -db -f /v/run/proxy/haproxy.cfg"


def test_free_port_is_below_the_ephemeral_range_and_never_twice():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [devstack.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(21000 <= port < low for port in ports)


def test_proc_waits_for_an_answer_and_stops_its_session(tmp_path):
    port = devstack.free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    proc = devstack.Proc("http", argv, tmp_path)
    try:
        devstack.wait_answering(f"http://127.0.0.1:{port}/", proc=proc, timeout=30)
        assert devstack.answers(f"http://127.0.0.1:{port}/")
    finally:
        devstack.stop_all()
    assert proc.popen.poll() is not None
    assert proc not in devstack.PROCS
    assert not devstack.answers(f"http://127.0.0.1:{port}/")


def test_wait_answering_reports_a_process_that_exited(tmp_path):
    proc = devstack.Proc("gone", [sys.executable, "-c", "print('bye')"], tmp_path)
    started = time.monotonic()
    try:
        devstack.wait_answering("http://127.0.0.1:1/", proc=proc, timeout=30)
    except RuntimeError as error:
        assert "gone exited" in str(error) and "bye" in str(error)
    else:
        raise AssertionError("no error for a process that exited")
    finally:
        proc.stop()
    assert time.monotonic() - started < 10


def test_apps_never_import_the_devstack():
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "apps").rglob("*.py")
        if "scripts.devstack" in path.read_text() or "from scripts " in path.read_text()
    ]
    assert offenders == []
