#!/usr/bin/env python3
"""Deterministic, resumable data-parallel training example for Torus.

Trains a 2-layer MLP regression on a synthetic data set (made in-process from
a fixed seed, no downloads) with torch.nn.parallel.DistributedDataParallel,
backend gloo, CPU only.

The process group is set up from the standard environment variables only
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK; LOCAL_RANK and NODE_RANK are
logged), which the Torus platform sets for every process of a job.

Determinism: the global batch of step ``s`` is chosen by a generator seeded
with ``seed * 1_000_003 + s``, and rank ``r`` takes slice ``r::world_size`` of
it, so the data a step sees depends only on (seed, step, world size), never on
process history. Together with checkpoints that hold the model and optimizer
state, a run that is killed and resumed ends bit-for-bit where an
uninterrupted run with the same seed and world size ends.

Output (stdout, one flushed line per event, rank 0 only):

    torus-metric step=<n> loss=<float> samples_per_sec=<float>
    checkpoint saved step=<n> path=<path>
    resumed from <path> at step <n>
    model saved path=<dir>   (with --save-model or $TORUS_MODEL_DIR)
    {"final_step": N, "final_loss": L, "world_size": W, "param_checksum": C}

See examples/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import io
import json
import os
import sys
import time
import traceback
import warnings
from typing import NoReturn

# torch warns at import when numpy is absent; this example does not use numpy.
warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

# Synthetic data set: fixed size, made from the seed.
N_SAMPLES = 4096
IN_DIM = 16
HIDDEN = 64
LATEST = "latest"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Torus DDP example (gloo, CPU)")
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=20,
        help="rank 0 writes a checkpoint every K steps (and at the end)",
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--batch-size", type=int, default=64, help="GLOBAL batch size, split across ranks"
    )
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument(
        "--sleep-per-step",
        type=float,
        default=0.0,
        help="seconds to sleep after each step (to slow a test run down)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="process-group timeout in seconds")
    p.add_argument(
        "--save-model",
        default=os.environ.get("TORUS_MODEL_DIR") or None,
        help="rank 0 writes the final model here (model.pt, config.json); default "
        "$TORUS_MODEL_DIR, which Torus sets for a job whose spec has register_model",
    )
    args = p.parse_args(argv)
    if args.steps < 0:
        p.error("--steps must be >= 0")
    if args.checkpoint_every < 1:
        p.error("--checkpoint-every must be >= 1")
    if args.batch_size < 1:
        p.error("--batch-size must be >= 1")
    return args


def log(msg: str) -> None:
    print(msg, flush=True)


def env_int(name: str) -> int:
    val = os.environ.get(name)
    if val is None or val == "":
        raise SystemExit(
            f"train_ddp: environment variable {name} is not set "
            "(need MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK; LOCAL_RANK optional)"
        )
    try:
        return int(val)
    except ValueError:
        raise SystemExit(f"train_ddp: {name}={val!r} is not an integer") from None


def make_dataset(seed: int):
    """Synthetic regression data: y = tanh(x A) b + small noise, all from `seed`."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_SAMPLES, IN_DIM, generator=g)
    a = torch.randn(IN_DIM, 8, generator=g) / IN_DIM**0.5
    b = torch.randn(8, 1, generator=g)
    y = torch.tanh(x @ a) @ b + 0.01 * torch.randn(N_SAMPLES, 1, generator=g)
    return x, y


def make_model(seed: int) -> nn.Module:
    # Same seed on every rank -> identical init (DDP also broadcasts rank 0's
    # parameters at construction, so this is belt and braces).
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN_DIM, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def batch_indices(seed: int, step: int, batch_size: int) -> torch.Tensor:
    """Global batch for `step`: a function of (seed, step) only."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, N_SAMPLES, (batch_size,), generator=g)


def checkpoint_dir() -> str:
    return os.environ.get("TORUS_CHECKPOINT_DIR") or os.path.join(os.getcwd(), "checkpoints")


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str, writer) -> None:
    # Dot-prefixed temp name: Torus picks the newest non-dot file as a fallback
    # resume point when `latest` is missing, so a half-written file must never
    # look like a checkpoint.
    head, tail = os.path.split(path)
    tmp = os.path.join(head, f".{tail}.tmp.{os.getpid()}")
    with open(tmp, "wb") as f:
        writer(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def save_checkpoint(ckdir: str, step: int, model: nn.Module, opt, args, world_size: int) -> str:
    name = f"step-{step:08d}.pt"
    path = os.path.join(ckdir, name)
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "torch_rng_state": torch.get_rng_state(),
        "seed": args.seed,
        "world_size": world_size,
        "batch_size": args.batch_size,
        "lr": args.lr,
    }
    atomic_write_bytes(path, lambda f: torch.save(state, f))
    atomic_write_bytes(os.path.join(ckdir, LATEST), lambda f: f.write((name + "\n").encode()))
    return path


def resolve_resume_path(ckdir: str):
    """Checkpoint to resume from: $TORUS_RESUME_FROM, else <dir>/latest, else None."""
    explicit = os.environ.get("TORUS_RESUME_FROM")
    if explicit:
        if not os.path.isabs(explicit) and not os.path.exists(explicit):
            explicit = os.path.join(ckdir, explicit)
        if not os.path.exists(explicit):
            raise FileNotFoundError(f"TORUS_RESUME_FROM={explicit} does not exist")
        return explicit
    latest = os.path.join(ckdir, LATEST)
    if os.path.exists(latest):
        with open(latest) as f:
            name = f.read().strip()
        if not name:
            raise RuntimeError(f"{latest} is empty")
        path = name if os.path.isabs(name) else os.path.join(ckdir, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{latest} names {name}, which does not exist")
        return path
    return None


def broadcast_bytes(data, rank: int) -> bytes:
    """Broadcast a byte string from rank 0 with plain tensor collectives.

    (dist.broadcast_object_list needs numpy, which this example does not
    require, so bytes travel as a uint8 tensor.)
    """
    n = torch.tensor([len(data) if rank == 0 else 0], dtype=torch.int64)
    dist.broadcast(n, src=0)
    if rank == 0:
        buf = (
            torch.frombuffer(bytearray(data), dtype=torch.uint8)
            if n.item()
            else torch.empty(0, dtype=torch.uint8)
        )
    else:
        buf = torch.empty(int(n.item()), dtype=torch.uint8)
    if buf.numel():
        dist.broadcast(buf, src=0)
    return bytes(buf.tolist()) if rank != 0 else bytes(data)


def load_checkpoint_everywhere(rank: int):
    """Every rank loads the same checkpoint (map_location=cpu).

    Rank 0 decides which file; the name is broadcast so all ranks agree even if
    `latest` changes under them. If some rank cannot see the file (checkpoint
    dir not shared between nodes), rank 0 broadcasts the file's bytes instead.
    """
    ckdir = checkpoint_dir()
    chosen = resolve_resume_path(ckdir) if rank == 0 else None
    path = broadcast_bytes((chosen or "").encode() if rank == 0 else b"", rank).decode()
    if not path:
        return None, None
    have = torch.tensor([1 if os.path.exists(path) else 0], dtype=torch.int64)
    dist.all_reduce(have, op=dist.ReduceOp.MIN)
    if int(have.item()) == 1:
        state = torch.load(path, map_location="cpu", weights_only=False)
    else:
        raw = b""
        if rank == 0:
            with open(path, "rb") as f:
                raw = f.read()
        raw = broadcast_bytes(raw, rank)
        state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
    return path, state


def ordered_sum(t: torch.Tensor, group=None) -> torch.Tensor:
    """Sum `t` over ranks in a fixed order (rank 0 + rank 1 + ...).

    all_gather then add in rank order: the result is bitwise the same on every
    rank and in every run, whatever the collective algorithm, bucket layout or
    timing. (A plain all_reduce sums each element in an order that depends on
    where it falls in the ring's chunks, and DDP's first iteration after
    construction uses a different bucket layout than later ones, so a resumed
    run would differ from an uninterrupted one in the last bits.)
    """
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t.contiguous(), group=group)
    total = parts[0].clone()
    for p in parts[1:]:
        total += p
    return total


def ordered_allreduce_hook(group, bucket):
    """DDP comm hook: mean of the gradient bucket, summed in rank order."""
    buf = bucket.buffer()
    ws = dist.get_world_size(group)
    parts = [torch.empty_like(buf) for _ in range(ws)]
    fut = dist.all_gather(parts, buf, group=group, async_op=True).get_future()

    def reduce(_fut):
        total = parts[0].clone()
        for p in parts[1:]:
            total += p
        return total.div_(ws)

    return fut.then(reduce)


def param_checksum(model: nn.Module) -> float:
    return float(sum(p.detach().double().sum().item() for p in model.parameters()))


def save_model(directory: str, model: nn.Module, args, final_step: int, final_loss: float):
    """The trained model for the registry: its weights and what rebuilds it."""
    os.makedirs(directory, exist_ok=True)
    atomic_write_bytes(
        os.path.join(directory, "model.pt"), lambda f: torch.save(model.state_dict(), f)
    )
    config = {
        "architecture": "mlp",
        "in_dim": IN_DIM,
        "hidden": HIDDEN,
        "out_dim": 1,
        "seed": args.seed,
        "steps": final_step,
        "final_loss": final_loss,
        "torch": torch.__version__,
    }
    atomic_write_bytes(
        os.path.join(directory, "config.json"),
        lambda f: f.write(json.dumps(config, indent=2).encode() + b"\n"),
    )


def train(args) -> NoReturn:
    world_size = env_int("WORLD_SIZE")
    rank = env_int("RANK")
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    node_rank = os.environ.get("NODE_RANK", "?")
    env_int("MASTER_PORT")
    if not os.environ.get("MASTER_ADDR"):
        raise SystemExit("train_ddp: environment variable MASTER_ADDR is not set")

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    dist.init_process_group(
        "gloo",
        init_method="env://",
        world_size=world_size,
        rank=rank,
        timeout=datetime.timedelta(seconds=args.timeout),
    )
    ckdir = checkpoint_dir()
    if rank == 0:
        os.makedirs(ckdir, exist_ok=True)
        for stale in glob.glob(os.path.join(ckdir, ".*.tmp.*")):
            with contextlib.suppress(OSError):
                os.remove(stale)
        log(
            f"train_ddp: world_size={world_size} node_rank={node_rank} local_rank={local_rank} "
            f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
            f"torch={torch.__version__} checkpoint_dir={ckdir} steps={args.steps}"
        )
    dist.barrier()

    x_all, y_all = make_dataset(args.seed)
    model = make_model(args.seed)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    start_step = 0
    path, state = load_checkpoint_everywhere(rank)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        if "torch_rng_state" in state:
            torch.set_rng_state(state["torch_rng_state"])
        start_step = int(state["step"])
        if rank == 0:
            log(f"resumed from {path} at step {start_step}")
            if state.get("world_size") not in (None, world_size):
                log(
                    f"train_ddp: note: checkpoint was written with world_size="
                    f"{state['world_size']}, now {world_size}; the run stays valid "
                    "but is not bit-identical to a run at a single world size"
                )

    ddp = DDP(model)  # CPU module: no device_ids
    # Fixed-order gradient reduction (see ordered_sum) -> bitwise resumable.
    ddp.register_comm_hook(None, ordered_allreduce_hook)
    mse_sum = nn.MSELoss(reduction="sum")
    global_bs = args.batch_size

    for step in range(start_step + 1, args.steps + 1):
        t0 = time.perf_counter()
        idx = batch_indices(args.seed, step, global_bs)[rank::world_size]
        xb, yb = x_all[idx], y_all[idx]

        opt.zero_grad(set_to_none=True)
        sse = mse_sum(ddp(xb), yb)
        # DDP averages gradients over ranks; scaling by world_size/global_bs
        # makes the averaged gradient exactly that of the global-batch mean
        # loss, even when the shards are of unequal size.
        (sse * (world_size / global_bs)).backward()
        opt.step()

        loss = ordered_sum(sse.detach().reshape(1)).item() / global_bs

        if args.sleep_per_step > 0:
            time.sleep(args.sleep_per_step)
        dt = time.perf_counter() - t0

        if rank == 0:
            log(
                f"torus-metric step={step} loss={loss!r} "
                f"samples_per_sec={global_bs / dt if dt > 0 else 0.0:.2f}"
            )

        if step % args.checkpoint_every == 0 or step == args.steps:
            if rank == 0:
                p = save_checkpoint(ckdir, step, model, opt, args, world_size)
                log(f"checkpoint saved step={step} path={p}")
            dist.barrier()

    final_step = max(start_step, args.steps)
    if rank == 0:
        with torch.no_grad():
            final_loss = (nn.functional.mse_loss(model(x_all), y_all)).item()
        if args.save_model:
            save_model(args.save_model, model, args, final_step, final_loss)
            log(f"model saved path={args.save_model}")
        log(
            json.dumps(
                {
                    "final_step": final_step,
                    "final_loss": final_loss,
                    "world_size": world_size,
                    "param_checksum": param_checksum(model),
                }
            )
        )
    dist.barrier()
    # Every rank has passed the last barrier and everything is written: leave here, with the
    # DDP module still referenced. Freeing it (or destroy_process_group) runs
    # ProcessGroupGloo's destructor with the GIL held; that joins a worker thread which may
    # still be releasing the barrier's tensors and waits for the GIL, and the rank hangs for
    # good (one run in five on a busy machine: the job never ends). The OS closes the
    # sockets; there is nothing else to release.
    leave(0, ddp)


def leave(code: int, *keep) -> NoReturn:
    """Flush and exit at once, skipping every destructor (`keep`: objects that must not be
    freed before the exit)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        train(args)
    except SystemExit:
        raise
    except BaseException:
        rank = os.environ.get("RANK", "?")
        sys.stderr.write(f"train_ddp: rank {rank} failed:\n{traceback.format_exc()}")
        # Exit at once, without tearing the process group down: after a peer died, its
        # destructor can deadlock the same way (see the end of train), which would leave
        # this rank hanging instead of failing so the platform can restart the job.
        leave(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
