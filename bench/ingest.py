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
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "12")  # the shipper's live publishing: 12-14
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import django_setup, ensure_tenant, environment, finish, manage, pyspy_summary
from _ingest_cpu import _pids_with, cmdline, pids_of
from _ingest_data import (
    MARKER,
    OWNER,
    PROJECT_SLUG,
    RSYSLOG_INDEX_PREFIX,
    TENANT_SLUG,
    TMP_PREFIX,
    TOKEN_NAME,
    log,
    make_files,
)
from _ingest_es import delete_indices
from _ingest_report import MARKERS, compare_documents, spy_starter
from _ingest_rsyslog import ensure_rsyslog, other_rsyslogds, rsyslog_phase, rsyslog_version
from _ingest_torus import (
    drop_bench_jobs,
    other_shippers,
    shipper_settings,
    shipper_window,
    torus_phase,
)

from scripts.devstack import stop_all

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
