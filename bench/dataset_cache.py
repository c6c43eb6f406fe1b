"""The dataset cache on and off, for a job reading a dataset from a network filesystem.

The shared storage is a real network filesystem: sshfs (FUSE, the SFTP protocol) mounting a
directory that an sshd serves through a delaying TCP relay (each direction held back
`--delay-ms`, standing for a remote filer). Why not NFS: this machine's kernel has neither
the NFS client nor the server (no `nfs`/`nfsd` in /proc/filesystems, no modules to load), and
its traffic control has no `netem` qdisc. See bench/README.md.

A "job" is what the launcher runs on a node before the user's program: the stager
(apps/compute/backends/stager.py, as a `python3 -I` process, exactly as on a node), then a
reader process that reads every file of the dataset at $TORUS_DATASET_TRAIN. The peer is the
same job with `dataset_cache: false` (reading the mount in place), in the same run.

Needs root (sshd, FUSE mount) and Debian's sshfs and openssh-server. The last stdout line is
the result: {"benchmark": "dataset_cache", "metrics", "peers", "ratios"}.
"""

# ruff: noqa: S603, S607  (fixed argv of system tools and this interpreter, no shell)

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.devstack import free_port  # noqa: E402 (ROOT on the path first)

STAGER = ROOT / "apps" / "compute" / "backends" / "stager.py"
NODE = "bench-node"
READER = """
import os, sys
total = 0
for dirpath, _dirs, files in os.walk(sys.argv[1]):
    for name in files:
        with open(os.path.join(dirpath, name), "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
print(total)
"""


def log(message: str) -> None:
    print(f"[dataset_cache] {message}", file=sys.stderr, flush=True)


class DelayRelay:
    """127.0.0.1:port -> target, every chunk held back `delay` seconds in each direction
    (order kept, pipelining kept: a one-way latency, not a bandwidth cap)."""

    def __init__(self, target_port: int, delay: float):
        self.target_port, self.delay = target_port, delay
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def _pipe(self, reader, writer):
        queue: asyncio.Queue = asyncio.Queue()

        async def send():
            while (item := await queue.get()) is not None:
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        try:
            while data := await reader.read(256 * 1024):
                queue.put_nowait((time.monotonic() + self.delay, data))
        finally:
            queue.put_nowait(None)
            await sender

    async def _handle(self, reader, writer):
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    def _run(self):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self.ready.set()
        with contextlib.suppress(Exception):
            self.loop.run_forever()
        server.close()

    def start(self):
        self.ready = threading.Event()
        self.thread.start()
        self.ready.wait(10)


class Filer:
    """sshd on the loopback serving `export`, mounted with sshfs through the relay."""

    def __init__(self, work: Path, delay: float):
        self.work, self.delay = work, delay
        self.export, self.mount = work / "export", work / "mnt"
        self.sshd = None

    def start(self):
        tools = ("/usr/sbin/sshd", "sshfs", "ssh-keygen", "fusermount")
        if not all(shutil.which(tool) for tool in tools):
            log("sshfs or sshd missing: running platform/bench/install-peers")
            installer = ROOT / "platform" / "bench" / "install-peers"
            subprocess.run([str(installer)], check=True, stdout=sys.stderr)
        for tool in tools:
            if not shutil.which(tool):
                raise SystemExit(f"{tool} still missing after platform/bench/install-peers")
        self.export.mkdir()
        self.mount.mkdir()
        keys = self.work / "keys"
        keys.mkdir(mode=0o700)
        for name in ("host", "client"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],
                check=True,
            )
        shutil.copy(keys / "client.pub", keys / "authorized_keys")
        Path("/run/sshd").mkdir(exist_ok=True)
        port = free_port()
        config = self.work / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
            f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nUsePAM no\nStrictModes no\n"
            f"PidFile {self.work / 'sshd.pid'}\nSubsystem sftp internal-sftp\n"
        )
        self.sshd = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
            stderr=open(self.work / "sshd.log", "wb"),  # noqa: SIM115
        )
        time.sleep(0.5)
        self.relay = DelayRelay(port, self.delay)
        self.relay.start()
        subprocess.run(
            ["sshfs", "-p", str(self.relay.port), f"root@127.0.0.1:{self.export}",
             str(self.mount), "-o", f"IdentityFile={keys / 'client'}",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "allow_other", "-o", "ro"],
            check=True, timeout=60,
        )  # fmt: skip

    def stop(self):
        subprocess.run(["fusermount", "-u", str(self.mount)], check=False)
        if self.sshd:
            self.sshd.terminate()
            self.sshd.wait(10)


def make_dataset(export: Path, *, files: int, size: int) -> dict:
    version_id = "00000000-0000-4000-8000-00000000b001"
    root = export / "v1"
    entries = []
    for i in range(files):
        path = f"shard-{i // 50:03d}/part-{i:05d}.bin"
        data = os.urandom(size)
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        entries.append({"path": path, "size": size, "sha256": hashlib.sha256(data).hexdigest()})
    return {"id": version_id, "as": "TRAIN", "ref": "bench:1", "storage": "posix",
            "root": "", "files": entries}  # fmt: skip


def job(work: Path, version: dict, *, cache: bool, number: int) -> dict:
    """One job's dataset work: the stager, then the reader, timed from outside."""
    out = work / f"attempt-{'on' if cache else 'off'}-{number}"
    out.mkdir()
    plan = {
        "out_dir": str(out),
        "cache": cache,
        "cache_dir": str(work / "cache" / "{node}" / "tenant" / "project" / "user"),
        "limit_bytes": 100 * 1024**3,
        "lease_s": 0,
        "datasets": [version],
    }
    (out / "datasets.json").write_text(json.dumps(plan))
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": NODE}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-I", str(STAGER), str(out / "datasets.json")], env=env, check=True,
        capture_output=True,
    )  # fmt: skip
    staged = time.perf_counter()
    lines = (out / f"datasets-{NODE}.env").read_text().splitlines()
    path = dict(line.split("=", 1) for line in lines)["TORUS_DATASET_TRAIN"]
    read = subprocess.run(
        [sys.executable, "-I", "-c", READER, path], check=True, capture_output=True, text=True
    )
    ended = time.perf_counter()
    report = json.loads((out / f"dataset-cache-{NODE}.json").read_text())
    return {
        "seconds": ended - started,
        "stage_seconds": staged - started,
        "read_seconds": ended - staged,
        "bytes_read": int(read.stdout),
        "hits": report["hits"],
        "misses": report["misses"],
        "bytes_staged": report["bytes_staged"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--file-kib", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=5, help="repeated jobs per mode")
    parser.add_argument("--delay-ms", type=float, default=2.0, help="one way, each direction")
    parser.add_argument("--quick", action="store_true", help="100 files, 3 jobs")
    args = parser.parse_args()
    if args.quick:
        args.files, args.jobs = 100, 3
    if os.geteuid() != 0:
        raise SystemExit("run as root (sshd and a FUSE mount)")
    work = Path(tempfile.mkdtemp(prefix="torus-bench-dataset-cache-"))
    filer = Filer(work, args.delay_ms / 1000)
    try:
        filer.start()
        log(f"sshfs through a {args.delay_ms} ms relay mounted at {filer.mount}")
        version = make_dataset(filer.export, files=args.files, size=args.file_kib * 1024)
        version["root"] = str(filer.mount / "v1")
        # the user's cache subtree on the node, as dispatch makes it (apps/jobs/staging.py)
        (work / "cache" / NODE / "tenant" / "project" / "user").mkdir(parents=True, mode=0o700)
        total = args.files * args.file_kib * 1024
        log(f"dataset: {args.files} files, {total / 2**20:.0f} MiB")
        off, on = [], []
        for number in range(args.jobs):  # alternate, so both see the same machine
            off.append(job(work, version, cache=False, number=number))
            on.append(job(work, version, cache=True, number=number))
            log(f"job {number}: off {off[-1]['seconds']:.2f}s, on {on[-1]['seconds']:.2f}s "
                f"(hits {on[-1]['hits']}, misses {on[-1]['misses']})")  # fmt: skip
        assert all(r["bytes_read"] == total for r in off + on)
        repeated_on = statistics.median(r["seconds"] for r in on[1:])
        repeated_off = statistics.median(r["seconds"] for r in off[1:])
        first_off = off[0]["seconds"]
        metrics = {
            "files": args.files,
            "bytes": total,
            "delay_ms_each_way": args.delay_ms,
            "filesystem": "sshfs (FUSE, SFTP) through a delaying TCP relay",
            "cache_first_job_seconds": round(on[0]["seconds"], 3),
            "cache_first_job_stage_seconds": round(on[0]["stage_seconds"], 3),
            "cache_repeated_job_seconds": round(repeated_on, 3),
            "cache_hits": sum(r["hits"] for r in on),
            "cache_misses": sum(r["misses"] for r in on),
            "cache_bytes_staged": sum(r["bytes_staged"] for r in on),
            "cache_repeated_mib_per_s": round(total / repeated_on / 2**20, 1),
        }
        peers = {
            "no_cache_first_job_seconds": round(first_off, 3),
            "no_cache_repeated_job_seconds": round(repeated_off, 3),
            "no_cache_mib_per_s": round(total / repeated_off / 2**20, 1),
        }
        ratios = {
            "repeated_job_speedup_vs_no_cache": round(repeated_off / repeated_on, 2),
            "first_job_cost_vs_no_cache": round(on[0]["seconds"] / first_off, 2),
        }
        from _common import write_result  # the platform's environment, after the run

        result = {
            "benchmark": "dataset_cache",
            "metrics": metrics,
            "peers": peers,
            "ratios": ratios,
        }
        log(f"results in {write_result(result).relative_to(ROOT)}")
        print(json.dumps(result))
    finally:
        filer.stop()
        for path in work.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
