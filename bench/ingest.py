"""Log-ingest benchmark: the Torus log shipper beside rsyslog (imfile -> omelasticsearch)
shipping the same backlog of training-log files into the same Elasticsearch: lines per second
and CPU-seconds per million lines, for each and for Elasticsearch.

Run alone:  .venv/bin/python bench/ingest.py [--quick] [--lines N] [--files F] [--repeat R]
                                             [--py-spy] [--keep-logs]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "ingest", "metrics": {...}, "peers": {...}, "ratios": {...}}

It uses the real `torus` database (tenant `bench-ingest`, project `ingest`) and runs its own
`manage.py run_shipper` with TORUS_REDIS_DB_BASE=12, and its own foreground rsyslogd (own
config, pid file and work directory; the system's rsyslog is never touched). rsyslog and its
Elasticsearch output are installed by platform/bench/install-peers when missing.
See bench/README.md.
"""

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "12")  # the shipper's live publishing: 12-14
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ENV,
    ROOT,
    VAR,
    django_setup,
    ensure_tenant,
    environment,
    finish,
    manage,
    process_cpu_seconds,
    pyspy_path,
    pyspy_start,
    pyspy_stop,
    pyspy_summary,
)
from _common import log as _log

from scripts.devstack import Proc, shipper_command, stop_all

TENANT_SLUG, PROJECT_SLUG, OWNER, TOKEN_NAME = "bench-ingest", "ingest", "bench-owner", "ingest"
RSYSLOG_INDEX_PREFIX = "bench-rsyslog-"
TEMPLATE = ROOT / "apps" / "logs" / "data" / "torus-logs.json"
INSTALL_PEERS = ROOT / "platform" / "bench" / "install-peers"
MODULE_DIRS = ["/usr/lib/x86_64-linux-gnu/rsyslog", "/usr/lib/aarch64-linux-gnu/rsyslog"]
MODULE_DIRS += ["/usr/lib64/rsyslog", "/usr/lib/rsyslog"]
TMP_PREFIX = "torus-bench-ingest-"  # our temp dirs; rsyslogd instances are found by it too
MARKER = "TORUS_BENCH_INGEST"  # in the environment of the shippers this script starts
POLL_S = 0.5
NODE = "n1"


def log(msg: str) -> None:
    _log("ingest", msg)


# -- the data -------------------------------------------------------------------------------------


def make_files(folder: Path, lines: int, files: int, seed: int = 7) -> tuple[list[Path], dict]:
    """`files` files with `lines` training-log lines in all (~100-150 bytes each)."""
    rnd = random.Random(seed)  # noqa: S311 (test data)
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    paths, total_bytes = [], 0
    samples: dict[int, str] = {}  # offset -> line, the first 40 lines of file 0
    for f in range(files):
        count = lines // files + (1 if f < lines % files else 0)
        path = folder / f"rank{f}.log"
        clock = day + timedelta(seconds=f)
        offset, step, loss = 0, 0, 9.5
        with open(path, "wb") as out:
            chunk = []
            for i in range(count):
                clock += timedelta(microseconds=rnd.randint(2000, 12000))
                step += 1
                loss = max(0.05, loss * 0.99995 + rnd.uniform(-0.01, 0.01))
                text = _line(rnd, f, clock, step, loss)
                raw = text.encode() + b"\n"
                if f == 0 and i < 40:
                    samples[offset] = text
                offset += len(raw)
                chunk.append(raw)
                if len(chunk) >= 4096:
                    out.write(b"".join(chunk))
                    chunk.clear()
            out.write(b"".join(chunk))
        total_bytes += offset
        paths.append(path)
    return paths, {"bytes": total_bytes, "samples": samples}


def _line(rnd: random.Random, rank: int, clock: datetime, step: int, loss: float) -> str:
    kind = rnd.random()
    lr = 3e-4 * min(1.0, step / 2000)
    if kind < 0.40:  # Python logging
        stamp = clock.strftime("%Y-%m-%d %H:%M:%S,") + f"{clock.microsecond // 1000:03d}"
        return (
            f"{stamp} INFO [rank {rank}] trainer.py:{rnd.randint(100, 400)} epoch {step // 5000} "
            f"step {step}/500000 loss={loss:.6f} lr={lr:.3e} grad_norm={rnd.uniform(0.2, 4):.4f} "
            f"tok/s={rnd.randint(90000, 140000)}"
        )
    if kind < 0.65:  # bracketed ISO time, no level
        return (
            f"[{clock.isoformat(timespec='microseconds').replace('+00:00', 'Z')}] rank={rank} "
            f"step={step} | loss {loss:.4f} | ppl {2.718 ** min(loss, 20):.2f} | "
            f"{rnd.uniform(900, 1300):.1f} samples/s | mem {rnd.uniform(20, 70):.1f}/80.0 GiB"
        )
    if kind < 0.85:  # a progress bar, no time (UTF-8 block characters)
        done = step % 10000
        bar = "█" * (done * 10 // 10000) + " " * (10 - done * 10 // 10000)
        return (
            f"Epoch {step // 10000}: {done // 100:3d}%|{bar}| {done}/10000 "
            f"[{done // 300:02d}:{done % 60:02d}<{(10000 - done) // 300:02d}:"
            f"{rnd.randint(0, 59):02d}, {rnd.uniform(4, 6):.2f}it/s, loss={loss:.3f}, v_num={rank}]"
        )
    if kind < 0.96:  # a warning or debug line with a time zone
        level, what = rnd.choice(
            [
                ("WARNING", "torch.distributed: NCCL timeout approaching on comm 0x7f3a, rank"),
                ("DEBUG", "dataloader: worker 3 prefetched shard 0041-of-1024, queue depth"),
                ("ERROR", "checkpoint: retrying upload of shard after ConnectionResetError,"),
                ("WARN", "amp: gradient overflow, skipping step and lowering loss scale, rank"),
            ]
        )
        stamp = clock.strftime("%Y-%m-%dT%H:%M:%S.") + f"{clock.microsecond // 1000:03d}Z"
        return f"{stamp} {level} {what} {rank} (step {step})"
    # a metric line, as torus.log_metrics() prints it (apps/logs/metrics.py)
    return (
        f"torus-metric step={step} loss={loss:.6f} samples_per_sec={rnd.uniform(900, 1300):.1f} "
        f"lr={lr:.6g} grad_norm={rnd.uniform(0.2, 4):.4f}"
    )


# -- Elasticsearch --------------------------------------------------------------------------------


def es():
    from apps.logs.es import client

    return client()


def es_cpu_seconds() -> float:
    """Elasticsearch's own process CPU (all nodes), from its node stats."""
    stats = es().nodes.stats(metric="process")
    return sum(n["process"]["cpu"]["total_in_millis"] for n in stats["nodes"].values()) / 1000


def tree_cpu_seconds(pidfile: Path, name: str) -> float | None:
    """CPU of a daemon and its children, live and exited: the parent's utime+stime+cutime+
    cstime (exited children it reaped) plus each live child's utime+stime (PostgreSQL's
    backends). None if it cannot be found."""
    pid = None
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().split()[0])
    if pid is None or not Path(f"/proc/{pid}").is_dir():
        found = pids_of(name)
        pid = min(found) if found else None
    if pid is None:
        return None
    try:
        total = process_cpu_seconds(pid)
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def services_cpu() -> dict:
    """CPU seconds so far of Elasticsearch, PostgreSQL and Redis (deltas are what a phase cost
    them, and anything else that used them meanwhile)."""
    run = VAR / "run"
    return {
        "es": es_cpu_seconds(),
        "pg": tree_cpu_seconds(run / "postgres.pid", "postgres"),
        "redis": tree_cpu_seconds(run / "redis.pid", "redis-server"),
    }


def services_delta(before: dict) -> dict:
    after = services_cpu()
    return {
        key: round(after[key] - before[key], 2)
        if after[key] is not None and before[key] is not None
        else None
        for key in before
    }


def es_count(index: str, job_id: str | None = None) -> int:
    es().indices.refresh(index=index, ignore_unavailable=True, allow_no_indices=True)
    query = {"term": {"job": job_id}} if job_id else {"match_all": {}}
    body = es().count(index=index, query=query, ignore_unavailable=True, allow_no_indices=True)
    return body["count"]


def es_settle(timeout: float = 30.0) -> None:
    """Wait until Elasticsearch is quiet (merges of the last phase done), so that the next
    phase's Elasticsearch CPU is its own."""
    deadline = time.monotonic() + timeout
    last = es_cpu_seconds()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = es_cpu_seconds()
        if now - last < 0.15:
            return
        last = now


def delete_indices(pattern: str) -> None:
    names = es().indices.get(index=pattern, allow_no_indices=True, ignore_unavailable=True)
    for name in names:
        es().indices.delete(index=name, ignore_unavailable=True)


def create_rsyslog_index(name: str) -> None:
    """The same settings and mappings as a Torus daily index (the Torus template)."""
    template = json.loads(TEMPLATE.read_text())["template"]
    es().indices.create(index=name, settings=template["settings"], mappings=template["mappings"])


# -- rsyslog --------------------------------------------------------------------------------------


def rsyslog_module_dir() -> Path | None:
    dirs = list(MODULE_DIRS)
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        listed = subprocess.run(
            ["dpkg", "-L", "rsyslog-elasticsearch"],  # noqa: S607
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        dirs = [str(Path(p).parent) for p in listed.split() if p.endswith("/omelasticsearch.so")]
        dirs += MODULE_DIRS
    for folder in dirs:
        if (Path(folder) / "omelasticsearch.so").is_file() and (
            Path(folder) / "imfile.so"
        ).is_file():
            return Path(folder)
    return None


def ensure_rsyslog() -> tuple[str, Path]:
    folder = rsyslog_module_dir()
    if folder is None or not shutil.which("rsyslogd"):
        log("rsyslog with omelasticsearch missing: running platform/bench/install-peers")
        subprocess.run([str(INSTALL_PEERS)], check=True, stdout=sys.stderr)  # noqa: S603
        folder = rsyslog_module_dir()
    exe = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
    if folder is None or not os.access(exe, os.X_OK):
        sys.exit("rsyslogd or its omelasticsearch module is still missing after install-peers")
    return exe, folder


def rsyslog_version(exe: str) -> str:
    out = subprocess.run([exe, "-v"], capture_output=True, text=True, check=False).stdout  # noqa: S603
    words = out.split()  # "rsyslogd  8.2302.0 (aka 2023.02) compiled with: ..."
    return " ".join(words[:2])


def pids_of(name: str) -> list[int]:
    argv = ["pgrep", "-x", name]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    return [int(p) for p in out.stdout.split()]


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def other_rsyslogds() -> list[int]:
    """rsyslogd processes that are not instances of this benchmark (e.g. the system's)."""
    return [p for p in pids_of("rsyslogd") if not any(TMP_PREFIX in a for a in cmdline(p))]


def rsyslog_conf(
    folder: Path,
    moddir: Path,
    index: str,
    paths: list[Path],
    attempts: list[str],
    ctx: dict,
    job_id: str,
    mode: str,
    batch: int,
) -> Path:
    """imfile -> the same fields, ids, timestamp and level as the Torus shipper -> omelasticsearch.

    The document is built in a local variable tree ($.doc) and sent whole (`%$.doc%`), so a
    line without a level has no `level` field, as in Torus. The id is <attempt>:stdout:<offset>
    (imfile's `fileoffset` is the byte offset of the line's start), as Torus's is.
    """
    work = folder / "work"
    work.mkdir()
    stamp = r"^\\[?([0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}([.,][0-9]+)?"
    stamp += r"(Z|[+-][0-9]{2}:?[0-9]{2})?)"
    level = r"\\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\\b"
    imfile = 'mode="inotify"' if mode == "inotify" else 'mode="polling" pollingInterval="1"'
    conf = f"""
global(workDirectory="{work}" maxMessageSize="16k")
module(load="{moddir}/imfile.so" {imfile})
module(load="{moddir}/omelasticsearch.so")
main_queue(queue.type="FixedArray" queue.size="100000" queue.dequeueBatchSize="{batch}")
template(name="torus_doc" type="string" string="%$.doc%")
template(name="torus_id" type="string" string="%$.doc!attempt%:stdout:%$.doc!offset%")
template(name="torus_now" type="string" string="%timereported:::date-rfc3339%")
ruleset(name="torus_ship") {{
  set $.doc!tenant = "{ctx["tenant"].pk}";
  set $.doc!project = "{ctx["project"].pk}";
  set $.doc!job = "{job_id}";
  set $.doc!stream = "stdout";
  set $.doc!node = "{NODE}";
  set $.doc!offset = cnum($!metadata!fileoffset);
  set $.ts = re_extract($msg, "{stamp}", 0, 1, "");
  if $.ts == "" then set $.doc!timestamp = exec_template("torus_now");
  else set $.doc!timestamp = replace(replace($.ts, " ", "T"), ",", ".");
  set $.level = re_extract($msg, "{level}", 0, 1, "");
  if $.level == "WARN" then set $.level = "WARNING";
  if $.level == "FATAL" then set $.level = "CRITICAL";
  if $.level != "" then set $.doc!level = $.level;
  set $.doc!message = $msg;
  set $.doc!truncated = "false";
  action(type="omelasticsearch" name="es" server="127.0.0.1" serverport="19200"
         searchIndex="{index}" template="torus_doc" dynbulkid="on" bulkid="torus_id"
         bulkmode="on" maxbytes="100m" esVersion.major="8" writeoperation="index")
}}
"""
    for i, (path, attempt) in enumerate(zip(paths, attempts, strict=True)):
        conf += (
            f'ruleset(name="in{i}") {{ set $.doc!attempt = "{attempt}"; '
            f"set $.doc!attempt_number = {i + 1}; call torus_ship }}\n"
            f'input(type="imfile" File="{path}" Tag="rank{i}" addMetadata="on" '
            f'ruleset="in{i}")\n'
        )
    out = folder / "rsyslog.conf"
    out.write_text(conf)
    return out


def rsyslog_phase(label, exe, moddir, paths, attempts, ctx, job_id, n, logdir, mode, batch):
    folder = Path(tempfile.mkdtemp(prefix="rsyslog-", dir=logdir))
    index = f"{RSYSLOG_INDEX_PREFIX}{folder.name.lower().replace('_', '-')}"
    create_rsyslog_index(index)
    conf = rsyslog_conf(folder, moddir, index, paths, attempts, ctx, job_id, mode, batch)
    check = subprocess.run(  # noqa: S603
        [exe, "-N1", "-f", str(conf)], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        raise RuntimeError(f"rsyslogd rejects its config:\n{check.stderr}")
    es_settle()
    svc0 = services_cpu()
    log(f"{label}: rsyslogd ({mode}) -> {index}")
    started = time.perf_counter()
    proc = Proc(label, [exe, "-n", "-f", str(conf), "-i", str(folder / "rsyslogd.pid")], logdir)
    try:
        seconds = wait_count(proc, index, None, n, started, label)
        cpu = process_cpu_seconds(proc.popen.pid)
        services = services_delta(svc0)
    finally:
        proc.stop()
    result = _figures(n, seconds, cpu, services)
    result.update({"index": index, "imfile_mode": mode, "batch": batch})
    result["count_after_stop"] = es_count(index)
    log(f"{label}: {_summary(result)}")
    return result


# -- Torus ----------------------------------------------------------------------------------------


def shipper_window() -> tuple[int, int]:
    """(hours the platform's shippers look back, hours ours looks back).

    The bench attempts are dated just outside the platform's window and inside ours, so a
    platform shipper running on this machine (make up) never ships them beside ours."""
    from django.conf import settings

    platform_hours = settings.TORUS_SHIPPER_RECENT_HOURS
    return platform_hours, platform_hours + 2


def shipper_settings() -> dict:
    from django.conf import settings

    names = ["INTERVAL", "READ_BYTES", "READS_PER_PASS", "BULK_DOCS"]
    return {name.lower(): getattr(settings, f"TORUS_SHIPPER_{name}", None) for name in names}


def backlog(hours: int) -> int:
    """Ended attempts in the window that the shipper has not finished with yet (the same
    test as its own: JobAttempt.logs_shipped)."""
    from django.utils import timezone

    from apps.jobs.models import ATTEMPT_ENDED, JobAttempt

    recent = timezone.now() - timedelta(hours=hours)
    return (
        JobAttempt.objects.filter(logs_shipped=False, created_at__gte=recent)
        .filter(state__in=list(ATTEMPT_ENDED))
        .exclude(stdout_path="")
        .count()
    )


def other_shippers() -> list[int]:
    """`manage.py run_shipper` processes that this script did not start."""
    found = []
    for pid in _pids_with("run_shipper"):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if "run_shipper" in cmdline(pid) and f"{MARKER}=".encode() not in environ:
            found.append(pid)
    return found


def _pids_with(word: str) -> list[int]:
    argv = ["pgrep", "-f", word]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    return [int(p) for p in out.stdout.split() if int(p) != os.getpid()]


def start_shipper(label: str, logdir: Path, hours: int) -> Proc:
    env = {**ENV, "TORUS_SHIPPER_RECENT_HOURS": str(hours), MARKER: "1"}
    return Proc(label, shipper_command(), logdir, env=env)


def wait_idle(proc: Proc, hours: int, label: str, timeout: float = 1800.0) -> dict:
    """Until the shipper has started (Django loaded, template installed) and shipped every
    ended attempt in its window; then its idle CPU rate over 3 s."""
    deadline = time.monotonic() + timeout
    said = 0.0
    while True:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"the shipper exited:\n{proc.tail()}")
        left = backlog(hours)
        if left == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{label}: {left} attempts still not shipped after {timeout:.0f} s")
        if time.monotonic() - said > 15:
            log(f"{label}: the shipper is catching up with {left} other attempts first")
            said = time.monotonic()
        time.sleep(1.0)
    time.sleep(1.5)  # at least one more (idle) pass
    cpu0, t0 = process_cpu_seconds(proc.popen.pid), time.perf_counter()
    time.sleep(3.0)
    cpu1, t1 = process_cpu_seconds(proc.popen.pid), time.perf_counter()
    return {"startup_cpu_s": round(cpu0, 2), "idle_cpu_per_s": round((cpu1 - cpu0) / (t1 - t0), 4)}


def make_attempts(ctx, paths, empty: Path, job_id: str, attempt_ids: list[str], hours: int):
    """One ended job with an attempt per file (stdout = the file, stderr = empty), dated
    `hours` ago. Committed when this returns."""
    from django.db import transaction
    from django.utils import timezone

    from apps.jobs.models import AttemptState, Job, JobAttempt
    from apps.jobs.spec import JobSpecSerializer, normalise, totals

    data = {
        "project": str(ctx["project"].pk),
        "name": "bench-ingest",
        "command": ["python", "train.py"],
        "resources": {"gpus_per_node": 0, "nodes": len(paths)},
    }
    serializer = JobSpecSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    spec = normalise(dict(serializer.validated_data))
    when = timezone.now() - timedelta(hours=hours)
    with transaction.atomic():
        job = Job.objects.create(
            id=uuid.UUID(job_id),
            tenant=ctx["tenant"],
            project=ctx["project"],
            user=ctx["user"],
            name=spec["name"],
            spec=spec,
            state="SUCCEEDED",
            cluster=ctx["cluster"],
            priority=spec["priority"],
            labels=spec["labels"],
            started_at=when,
            finished_at=when,
            exit_code=0,
            **totals(spec),
        )
        JobAttempt.objects.bulk_create(
            [
                JobAttempt(
                    id=uuid.UUID(attempt_id),
                    job=job,
                    number=i + 1,
                    state=AttemptState.SUCCEEDED,
                    nodes=[NODE],
                    stdout_path=str(path),
                    stderr_path=str(empty),
                    started_at=when,
                    ended_at=when,
                    exit_code=0,
                )
                for i, (path, attempt_id) in enumerate(zip(paths, attempt_ids, strict=True))
            ]
        )
        # auto_now_add wins on create: date them afterwards, in the same transaction
        Job.objects.filter(pk=job.pk).update(created_at=when)
        JobAttempt.objects.filter(job=job).update(created_at=when)
    return job


def torus_phase(label, ctx, paths, empty, job_id, attempts, n, logdir, hours, spy=None) -> dict:
    from apps.logs.models import JobMetric

    platform_hours, ours = hours
    delete_indices(f"torus-logs-{TENANT_SLUG}-*")
    es_settle()
    proc = start_shipper(label, logdir, ours)
    sampler = None
    try:
        idle = wait_idle(proc, ours, label)
        log(
            f"{label}: shipper idle (startup {idle['startup_cpu_s']} CPU-s, idle "
            f"{idle['idle_cpu_per_s'] * 100:.1f} % of a core); creating the attempts"
        )
        if spy:
            sampler = spy(proc.popen.pid)
        svc0, cpu0 = services_cpu(), process_cpu_seconds(proc.popen.pid)
        started = time.perf_counter()
        job = make_attempts(ctx, paths, empty, job_id, attempts, platform_hours + 1)
        seconds = wait_count(proc, f"torus-logs-{TENANT_SLUG}-*", str(job.pk), n, started, label)
        cpu = process_cpu_seconds(proc.popen.pid) - cpu0
        services = services_delta(svc0)
        cursors = _wait_cursors(job, len(paths))
        cursor_s = time.perf_counter() - started
    finally:
        if sampler is not None:
            pyspy_stop(sampler)
        proc.stop()
    result = _figures(n, seconds, cpu, services)
    result.update(idle)
    result["net_of_idle_cpu_s"] = round(cpu - idle["idle_cpu_per_s"] * seconds, 2)
    result["cursors_complete_after_s"] = round(cursor_s, 2)
    result["cursor_lines"] = sum(c.lines for c in cursors)
    result["complete_streams"] = sum(1 for c in cursors if c.complete)
    result["metric_points"] = JobMetric.objects.filter(job=job).count()
    result["count_after_stop"] = es_count(f"torus-logs-{TENANT_SLUG}-*", str(job.pk))
    result["job"] = str(job.pk)
    if result["cursor_lines"] != n:
        log(f"warning: the cursors count {result['cursor_lines']} lines, not {n}")
    log(f"{label}: {_summary(result)}")
    return result


def _wait_cursors(job, files: int, timeout: float = 30.0) -> list:
    from apps.logs.models import LogCursor

    deadline = time.monotonic() + timeout
    while True:
        cursors = list(LogCursor.objects.filter(attempt__job=job))
        if len(cursors) == 2 * files and all(c.complete for c in cursors):
            return cursors
        if time.monotonic() > deadline:
            return cursors
        time.sleep(0.1)


def drop_bench_jobs(ctx) -> int:
    from apps.jobs.models import Job

    deleted, _ = Job.objects.filter(project=ctx["project"]).delete()
    return deleted


# -- shared ---------------------------------------------------------------------------------------


def wait_count(proc: Proc, index: str, job_id, n: int, started: float, label: str) -> float:
    """Seconds from `started` until Elasticsearch counts n documents (refresh + count every
    POLL_S); fails if the ingester dies or stops making progress for two minutes."""
    last, last_change, said = -1, time.monotonic(), 0.0
    while True:
        time.sleep(POLL_S)
        count = es_count(index, job_id)
        elapsed = time.perf_counter() - started
        if count >= n:
            if count > n:
                raise RuntimeError(f"{label}: {count} documents for {n} lines (duplicates?)")
            return elapsed
        if count != last:
            last, last_change = count, time.monotonic()
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{label}: exited with {count}/{n} documents:\n{proc.tail()}")
        if time.monotonic() - last_change > 120:
            raise RuntimeError(f"{label}: stuck at {count}/{n} documents:\n{proc.tail()}")
        if time.monotonic() - said > 10:
            log(f"{label}: {count}/{n} documents after {elapsed:.1f} s")
            said = time.monotonic()


def _figures(n: int, seconds: float, cpu: float, services: dict) -> dict:
    out = {
        "documents": n,
        "wall_s": round(seconds, 2),
        "lines_per_second": round(n / seconds),
        "cpu_s": round(cpu, 2),
        "cpu_seconds_per_million_lines": round(cpu / n * 1e6, 2),
        "es_cpu_s": services["es"],
        "es_cpu_seconds_per_million_lines": round(services["es"] / n * 1e6, 2),
    }
    for key in ("pg", "redis"):
        out[f"{key}_cpu_s"] = services[key]
    return out


def _summary(r: dict) -> str:
    return (
        f"{r['documents']} documents in {r['wall_s']} s ({r['lines_per_second']} lines/s), "
        f"{r['cpu_s']} CPU-s ({r['cpu_seconds_per_million_lines']} per million lines); "
        f"Elasticsearch {r['es_cpu_s']}, PostgreSQL {r['pg_cpu_s']}, Redis {r['redis_cpu_s']} CPU-s"
    )


def compare_documents(rsyslog_index: str, attempt: str, samples: dict) -> dict:
    """The first lines of file 0 as each side indexed them: the same fields and values?"""
    ids = [f"{attempt}:stdout:{offset}" for offset in samples]
    got = {}
    for side, index in (("rsyslog", rsyslog_index), ("torus", f"torus-logs-{TENANT_SLUG}-*")):
        es().indices.refresh(index=index, ignore_unavailable=True, allow_no_indices=True)
        hits = es().search(index=index, query={"ids": {"values": ids}}, size=len(ids))
        got[side] = {h["_id"]: h["_source"] for h in hits["hits"]["hits"]}
    same, differences = 0, []
    for offset, line in samples.items():
        doc_id = f"{attempt}:stdout:{offset}"
        a, b = got["rsyslog"].get(doc_id), got["torus"].get(doc_id)
        if a is None or b is None:
            differences.append({"id": doc_id, "missing": "rsyslog" if a is None else "torus"})
            continue
        a, b = dict(a), dict(b)
        a["truncated"] = str(a.get("truncated")).lower() == "true"
        own_stamp = line[:1].isdigit() or line[:2].startswith("[2")
        stamps = (a.pop("timestamp", None), b.pop("timestamp", None))
        if own_stamp and _instant(stamps[0]) != _instant(stamps[1]):
            differences.append({"id": doc_id, "timestamp": stamps})
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            differences.append({"id": doc_id, "fields": {k: [a.get(k), b.get(k)] for k in keys}})
        else:
            same += 1
    return {"compared": len(samples), "same": same, "differences": differences[:5]}


def _instant(text):
    if not text:
        return None
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


# -- py-spy (optional) ----------------------------------------------------------------------------


def spy_starter(out: Path):
    exe = pyspy_path()
    if not exe:
        log("--py-spy: no py-spy on PATH or in /tmp/bench-pyspy/bin; not sampling")
        return None

    def start(pid: int):
        return pyspy_start(pid, out, rate=100, subprocesses=False)

    return start


MARKERS = [
    ("ship_stream ", "ship_stream (all)"),
    ("events ", "parsing.events (all)"),
    ("_stamp ", "parsing._stamp"),
    ("_level ", "parsing._level"),
    ("_bulk ", "shipper._bulk (all)"),
    ("streaming_bulk ", "helpers.bulk (all)"),
    ("_process_bulk_chunk ", "helpers: one bulk request"),
    ("_chunk_actions ", "helpers: serialising actions"),
    ("dumps ", "JSON encoding"),
    ("isoformat ", "datetime.isoformat"),
    ("_metric_points ", "_metric_points"),
    ("bulk_create ", "JobMetric.bulk_create"),
    ("publish_lines ", "live.publish_lines"),
    ("to_line ", "search_backlog.to_line"),
    ("publish_metrics ", "live.publish_metrics"),
    ("_advance ", "cursor update"),
    ("_active_attempts ", "_active_attempts"),
    ("scan_pending ", "signatures.scan_pending"),
    ("perform_request ", "HTTP to Elasticsearch (all)"),
    ("execute ", "SQL (all)"),
]


# -- main -----------------------------------------------------------------------------------------


def sweep_leftovers(ctx) -> None:
    """What a killed earlier run left: our rsyslogd and shipper processes, our jobs, indices."""
    for pid in pids_of("rsyslogd"):
        if any(TMP_PREFIX in a for a in cmdline(pid)):
            log(f"stopping rsyslogd {pid} left by an earlier run")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    for pid in _pids_with("run_shipper"):
        with contextlib.suppress(OSError):
            if f"{MARKER}=".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                log(f"stopping shipper {pid} left by an earlier run")
                os.kill(pid, signal.SIGTERM)
    if ctx is not None:
        dropped = drop_bench_jobs(ctx)
        if dropped:
            log(f"deleted {dropped} rows of earlier bench-ingest jobs")
    delete_indices(f"torus-logs-{TENANT_SLUG}-*")
    delete_indices(f"{RSYSLOG_INDEX_PREFIX}*")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200,000 lines instead of 1,000,000")
    parser.add_argument("--lines", type=int, help="lines in all (default 1,000,000)")
    parser.add_argument("--files", type=int, default=4, help="files (attempts), default 4")
    parser.add_argument("--repeat", type=int, default=1, help="rsyslog+Torus rounds, default 1")
    parser.add_argument(
        "--imfile-mode", choices=["inotify", "polling"], default="inotify", help="rsyslog imfile"
    )
    parser.add_argument(
        "--rsyslog-batch",
        type=int,
        help="rsyslog's dequeue batch = documents per bulk request (default: the shipper's "
        "TORUS_SHIPPER_BULK_DOCS, so both send requests of the same size)",
    )
    parser.add_argument("--py-spy", action="store_true", help="one more Torus run, sampled")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    n = args.lines or (200_000 if args.quick else 1_000_000)
    if n < args.files or args.files < 1 or args.repeat < 1:
        parser.error("need --files >= 1, --lines >= --files and --repeat >= 1")
    logdir = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    ctx, result = None, None
    try:
        # ---- setup (not timed)
        exe, moddir = ensure_rsyslog()
        foreign = other_rsyslogds()
        if foreign:
            log(f"warning: other rsyslogd processes run ({foreign}); they share the CPU")
        manage("migrate", "--noinput", "--verbosity", "0")
        manage("cluster_register_local")
        django_setup()
        from apps.logs.index import template_install

        ctx = ensure_tenant(
            slug=TENANT_SLUG, project_slug=PROJECT_SLUG, owner=OWNER, token_name=TOKEN_NAME
        )
        sweep_leftovers(ctx)
        template_install()
        shippers = other_shippers()
        if shippers:
            log(f"note: other shippers run ({shippers}); the bench jobs are outside their window")
        hours = shipper_window()
        batch = args.rsyslog_batch or shipper_settings()["bulk_docs"] or 1024
        log(f"writing {n} lines into {args.files} files in {logdir}")
        t0 = time.perf_counter()
        paths, data = make_files(logdir, n, args.files)
        empty = logdir / "stderr.log"
        empty.touch()
        log(f"{data['bytes'] / 1e6:.1f} MB written in {time.perf_counter() - t0:.1f} s")
        metrics: dict = {
            "lines": n,
            "files": args.files,
            "bytes": data["bytes"],
            "mean_line_bytes": round(data["bytes"] / n, 1),
            "repeat": args.repeat,
            "environment_start": environment(),
            "rsyslog_version": rsyslog_version(exe),
            "other_rsyslogd_pids": foreign,
            "other_shipper_pids": shippers,
            "shipper_settings": shipper_settings(),
        }
        rs_runs, torus_runs, comparisons = [], [], []
        for k in range(args.repeat):
            attempts = [str(uuid.uuid4()) for _ in paths]
            job_id = str(uuid.uuid4())  # rsyslog's documents name a job too
            rs = rsyslog_phase(
                f"rsyslog-{k + 1}",
                exe,
                moddir,
                paths,
                attempts,
                ctx,
                job_id,
                n,
                logdir,
                args.imfile_mode,
                batch,
            )
            rs_runs.append(rs)
            tr = torus_phase(
                f"torus-{k + 1}", ctx, paths, empty, job_id, attempts, n, logdir, hours
            )
            torus_runs.append(tr)
            comparisons.append(compare_documents(rs["index"], attempts[0], data["samples"]))
            if comparisons[-1]["same"] != comparisons[-1]["compared"]:
                log(f"warning: documents differ: {comparisons[-1]['differences']}")
            delete_indices(rs["index"])
            delete_indices(f"torus-logs-{TENANT_SLUG}-*")
            drop_bench_jobs(ctx)
        spied = None
        if args.py_spy:
            starter = spy_starter(logdir / "pyspy-shipper.txt")
            if starter:
                attempts = [str(uuid.uuid4()) for _ in paths]
                spied = torus_phase(
                    "torus-py-spy",
                    ctx,
                    paths,
                    empty,
                    str(uuid.uuid4()),
                    attempts,
                    n,
                    logdir,
                    hours,
                    spy=starter,
                )
                spied["profile"] = pyspy_summary(logdir / "pyspy-shipper.txt", MARKERS)
                log(f"py-spy: {json.dumps(spied['profile'])}")
                delete_indices(f"torus-logs-{TENANT_SLUG}-*")
                drop_bench_jobs(ctx)

        for name, runs in (("rsyslog", rs_runs), ("torus", torus_runs)):
            if any(r["count_after_stop"] != n for r in runs):
                raise RuntimeError(
                    f"{name}: document counts {[r['count_after_stop'] for r in runs]}"
                )

        def median(runs, key):
            values = [r[key] for r in runs if r.get(key) is not None]
            return round(statistics.median(values), 2) if values else None

        both = (
            "lines_per_second",
            "cpu_seconds_per_million_lines",
            "wall_s",
            "cpu_s",
            "es_cpu_s",
            "es_cpu_seconds_per_million_lines",
            "pg_cpu_s",
            "redis_cpu_s",
        )
        shipper_only = ("net_of_idle_cpu_s", "idle_cpu_per_s", "startup_cpu_s")
        torus = {key: median(torus_runs, key) for key in both + shipper_only}
        rsys = {key: median(rs_runs, key) for key in both}
        metrics.update(
            {
                "torus_lines_per_second": torus["lines_per_second"],
                "torus_cpu_seconds_per_million_lines": torus["cpu_seconds_per_million_lines"],
                "torus_wall_s": torus["wall_s"],
                "torus_cpu_s": torus["cpu_s"],
                "torus_es_cpu_s": torus["es_cpu_s"],
                "torus_es_cpu_seconds_per_million_lines": torus["es_cpu_seconds_per_million_lines"],
                "torus_pg_cpu_s": torus["pg_cpu_s"],
                "torus_redis_cpu_s": torus["redis_cpu_s"],
                "torus_net_of_idle_cpu_s": torus["net_of_idle_cpu_s"],
                "torus_idle_cpu_per_s": torus["idle_cpu_per_s"],
                "torus_startup_cpu_s": torus["startup_cpu_s"],
                "torus_documents": n,
                "torus_runs": torus_runs,
                "documents_compared": comparisons,
                "environment_end": environment(),
            }
        )
        if spied:
            metrics["py_spy"] = spied
        peers = {
            "rsyslog_lines_per_second": rsys["lines_per_second"],
            "rsyslog_cpu_seconds_per_million_lines": rsys["cpu_seconds_per_million_lines"],
            "rsyslog_wall_s": rsys["wall_s"],
            "rsyslog_cpu_s": rsys["cpu_s"],
            "rsyslog_es_cpu_s": rsys["es_cpu_s"],
            "rsyslog_es_cpu_seconds_per_million_lines": rsys["es_cpu_seconds_per_million_lines"],
            "rsyslog_pg_cpu_s": rsys["pg_cpu_s"],
            "rsyslog_redis_cpu_s": rsys["redis_cpu_s"],
            "rsyslog_documents": n,
            "rsyslog_imfile_mode": args.imfile_mode,
            "rsyslog_batch": batch,
            "rsyslog_runs": rs_runs,
        }
        ratios = {
            "torus_vs_rsyslog_lines_per_second": round(
                torus["lines_per_second"] / rsys["lines_per_second"], 3
            ),
            "torus_vs_rsyslog_cpu_per_line": round(
                torus["cpu_seconds_per_million_lines"] / rsys["cpu_seconds_per_million_lines"], 3
            ),
            "torus_vs_rsyslog_es_cpu_per_line": round(
                torus["es_cpu_seconds_per_million_lines"]
                / rsys["es_cpu_seconds_per_million_lines"],
                3,
            ),
        }
        result = {"benchmark": "ingest", "metrics": metrics, "peers": peers, "ratios": ratios}
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
    except RuntimeError as exc:
        log(f"failed: {exc}")
    finally:
        stop_all()
        with contextlib.suppress(Exception):
            sweep_leftovers(ctx)
    return finish("ingest", result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    sys.exit(main())
