"""bench/ingest.py's constants and its data: the training-log files both sides ingest."""

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import ROOT
from _common import log as _log

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
