"""Live-tail benchmark: from a line written to a job's output file to a websocket client
holding it, through the real shipper, Elasticsearch, the Redis channel layer and uvicorn;
beside `tail -F` on the same file (the floor: seeing a new line with no platform at all).

Run alone:  .venv/bin/python bench/live_tail.py [--quick] [--seconds S] [--rates 100,2000]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "live_tail", "metrics": {...}, "peers": {...}, "ratios": {...}}

It uses the real `torus` database (tenant `bench-live`), starts its own uvicorn and
`manage.py run_shipper` with Redis databases 4-6, and refuses to run beside another shipper
(a platform's shipper would ship the bench's files too and take lines away from ours).
See bench/README.md.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    django_setup,
    ensure_tenant,
    environment,
    finish,
    manage,
    percentiles,
    process_cpu_seconds,
)
from _common import log as _log

from scripts.devstack import Proc, shipper_command, start_web, stop_all

LINE = re.compile(r"^live seq=(\d+) t=(\d+) ")
PAD = "x" * 60  # lines of about 100 bytes, like a training log's


def log(msg: str) -> None:
    _log("live_tail", msg)


def other_shippers() -> list[str]:
    """Pids of log shippers already running on this machine."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"run_shipper" in argv:
            found.append(cmdline.parent.name)
    return found


def make_attempt(ctx: dict, workdir: Path, label: str):
    """A RUNNING job with one RUNNING attempt whose output is a file we write ourselves."""
    from apps.jobs.models import Job, JobAttempt
    from apps.jobs.spec import JobSpecSerializer, normalise, totals

    data = {"project": str(ctx["project"].id), "name": f"live-{label}", "command": ["true"]}
    serializer = JobSpecSerializer(data={**data, "resources": {"gpus_per_node": 0}})
    serializer.is_valid(raise_exception=True)
    spec = normalise(dict(serializer.validated_data))
    job = Job.objects.create(
        tenant=ctx["tenant"],
        project=ctx["project"],
        user=ctx["user"],
        name=spec["name"],
        spec=spec,
        state="RUNNING",
        **totals(spec),
    )
    out, err = workdir / f"{label}.out", workdir / f"{label}.err"
    out.touch()
    err.touch()
    attempt = JobAttempt.objects.create(
        job=job, number=1, state="RUNNING", stdout_path=str(out), stderr_path=str(err)
    )
    return job, attempt


def write_lines(path: Path, rate: int, seconds: float) -> int:
    """Append `rate` lines per second for `seconds`, each stamped with its write time (ns),
    one write(2) per line as a process printing with flush would."""
    total = int(rate * seconds)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    start = time.monotonic()
    written = 0
    try:
        while written < total:
            due = min(total, int((time.monotonic() - start) * rate) + 1)
            while written < due:
                os.write(fd, f"live seq={written} t={time.time_ns()} {PAD}\n".encode())
                written += 1
            time.sleep(0.0005)
    finally:
        os.close(fd)
    return written


class Received:
    """Latencies (ms) of the lines a reader got, by sequence number, and what it missed."""

    def __init__(self):
        self.latency: dict[int, float] = {}
        self.duplicates = 0
        self.skipped = 0
        self.lock = threading.Lock()

    def line(self, text: str, now_ns: int) -> None:
        match = LINE.match(text)
        if not match:
            return
        seq, sent = int(match.group(1)), int(match.group(2))
        with self.lock:
            if seq in self.latency:
                self.duplicates += 1
            else:
                self.latency[seq] = (now_ns - sent) / 1e6


def websocket_reader(port: int, token: str, job_id, got: Received, ready, stop) -> None:
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{port}/ws/jobs/{job_id}/?tail=1"
    headers = {"Authorization": f"Bearer {token}"}
    with connect(url, origin=f"http://127.0.0.1:{port}", additional_headers=headers) as ws:
        first = json.loads(ws.recv(timeout=30))
        assert first["type"] == "backlog", first
        ready.set()
        while not stop.is_set():
            try:
                raw = ws.recv(timeout=0.5)
            except TimeoutError:
                continue
            now = time.time_ns()
            message = json.loads(raw)
            if message["type"] == "lines":
                for line in message["lines"]:
                    got.line(line["message"], now)
            elif message["type"] == "skipped":
                got.skipped += message["count"]


def tail_reader(path: Path, got: Received, stop) -> subprocess.Popen:
    """`tail -F -n 0 FILE`, each line timestamped when this process reads it."""
    proc = subprocess.Popen(  # noqa: S603
        [shutil.which("tail") or "/usr/bin/tail", "-F", "-n", "0", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        bufsize=0,
    )

    def pump():
        for raw in iter(proc.stdout.readline, b""):
            got.line(raw.decode(errors="replace"), time.time_ns())

    threading.Thread(target=pump, daemon=True).start()
    return proc


def phase(ctx, port: int, shipper: Proc, web: Proc, workdir: Path, rate: int, seconds: float):
    job, attempt = make_attempt(ctx, workdir, f"r{rate}")
    torus, floor = Received(), Received()
    ready, stop = threading.Event(), threading.Event()
    reader = threading.Thread(
        target=websocket_reader,
        args=(port, ctx["token"], job.pk, torus, ready, stop),
        daemon=True,
    )
    reader.start()
    if not ready.wait(30):
        raise RuntimeError("the websocket sent no backlog within 30 s")
    tail = tail_reader(Path(attempt.stdout_path), floor, stop)
    time.sleep(1.0)  # tail -F and the shipper have seen the (empty) file
    cpu = {
        "shipper": process_cpu_seconds(shipper.popen.pid),
        "web": process_cpu_seconds(web.popen.pid),
    }
    log(f"{rate} lines/s for {seconds:.0f} s")
    total = write_lines(Path(attempt.stdout_path), rate, seconds)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if len(torus.latency) + torus.skipped >= total and len(floor.latency) >= total:
            break
        time.sleep(0.1)
    stop.set()
    tail.terminate()
    reader.join(timeout=5)
    cpu = {
        "shipper": round(process_cpu_seconds(shipper.popen.pid) - cpu["shipper"], 2),
        "web": round(process_cpu_seconds(web.popen.pid) - cpu["web"], 2),
    }
    job.delete()  # its attempt and cursor with it; the shipper forgets it
    missing = total - len(torus.latency)
    log(
        f"{rate}/s: torus p95 {percentiles(list(torus.latency.values())).get('p95')} ms, "
        f"missing {missing}, tail -F p95 {percentiles(list(floor.latency.values())).get('p95')} ms"
    )
    return {
        "lines_written": total,
        "torus_latency_ms": percentiles(list(torus.latency.values())),
        "torus_received": len(torus.latency),
        "torus_missing": missing,
        "torus_skipped_notices": torus.skipped,
        "torus_duplicates": torus.duplicates,
        "tail_latency_ms": percentiles(list(floor.latency.values())),
        "tail_received": len(floor.latency),
        "cpu_seconds": cpu,
    }


def drop_indices() -> None:
    from apps.logs.es import client, index_pattern

    es = client()
    for name in es.indices.get(index=index_pattern("bench-live"), allow_no_indices=True):
        es.indices.delete(index=name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 s per rate instead of 30 s")
    parser.add_argument("--seconds", type=float, help="seconds of writing per rate")
    parser.add_argument("--rates", default="100,2000", help="lines per second, comma-separated")
    parser.add_argument("--keep-logs", action="store_true", help="keep the web/shipper logs")
    args, _ = parser.parse_known_args()  # make bench passes every benchmark the same options
    seconds = args.seconds or (10.0 if args.quick else 30.0)
    rates = [int(r) for r in args.rates.split(",")]
    if others := other_shippers():
        log(f"another log shipper runs (pid {', '.join(others)}): stop it (scripts/portal stop)")
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logdir = Path(tempfile.mkdtemp(prefix="torus-live-logs-"))
    workdir = None
    try:
        manage("migrate", "--noinput", "--verbosity", "0")
        django_setup()
        from django.conf import settings

        # the shipper reads a job's logs only below the job root (apps/identity/tree.py)
        Path(settings.TORUS_JOB_ROOT).mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="bench-live-", dir=settings.TORUS_JOB_ROOT))
        ctx = ensure_tenant(
            slug="bench-live", project_slug="tail", owner="bench-live-owner", token_name="live"
        )
        drop_indices()
        metrics: dict = {"environment_start": environment()}
        web, port = start_web(logdir, workers=1)
        shipper = Proc("shipper", shipper_command(), logdir)
        time.sleep(2.0)  # template installed, first pass done
        if shipper.popen.poll() is not None:
            raise RuntimeError(f"the shipper exited:\n{shipper.tail()}")
        for rate in rates:
            metrics[f"rate_{rate}"] = phase(ctx, port, shipper, web, workdir, rate, seconds)
        metrics["environment_end"] = environment()
        metrics["seconds_per_rate"] = seconds
        metrics["shipper_interval_ms"] = round(settings.TORUS_SHIPPER_INTERVAL * 1000)
    finally:
        stop_all()
        try:
            drop_indices()
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
    ratios, peers = {}, {}
    for rate in rates:
        m = metrics[f"rate_{rate}"]
        peers[f"tail_F_rate_{rate}_ms"] = m["tail_latency_ms"]
        for q in ("p50", "p95", "p99"):
            if m["tail_latency_ms"].get(q):
                ratios[f"rate_{rate}_{q}_torus_vs_tail"] = round(
                    m["torus_latency_ms"][q] / max(m["tail_latency_ms"][q], 0.01), 1
                )
    missing = sum(metrics[f"rate_{r}"]["torus_missing"] for r in rates)
    result = {"benchmark": "live_tail", "metrics": metrics, "peers": peers, "ratios": ratios}
    code = finish("live_tail", result, logdir=logdir, keep_logs=args.keep_logs)
    return code or (1 if missing else 0)


if __name__ == "__main__":
    sys.exit(main())
