"""bench/ingest.py's peer: rsyslog (omelasticsearch), configured, started and timed."""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import process_cpu_seconds
from _ingest_cpu import cmdline, pids_of, services_cpu, services_delta
from _ingest_data import INSTALL_PEERS, MODULE_DIRS, NODE, RSYSLOG_INDEX_PREFIX, TMP_PREFIX, log
from _ingest_es import create_rsyslog_index, es_count, es_settle
from _ingest_report import _figures, _summary, wait_count

from scripts.devstack import Proc

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
