"""bench/search.py's data set: constants, the planned jobs and their log lines."""

import math
import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from _common import log as _log


def log(msg: str) -> None:
    _log("search", msg)


TENANT_SLUG, OTHER_SLUG = "bench-search", "bench-search-other"
OWNER, OTHER_OWNER = "bench-search-owner", "bench-search-other-owner"
TOKEN_NAME = "bench-search"
PROJECTS = {TENANT_SLUG: ["llm", "vision", "speech", "rl"], OTHER_SLUG: ["llm", "vision"]}
PROJECT_WEIGHTS = [0.4, 0.3, 0.2, 0.1]
JOBS = {TENANT_SLUG: 200, OTHER_SLUG: 40}  # at most; one job per 1,000 lines below that
DAYS = 5
RETENTION_DAYS = 3650  # the most a tenant may have: hourly retention never drops our indices
GEN_VERSION = 2  # bump when the generated documents change: a stored set is then reloaded
NODES = [f"gpu-{i:02d}" for i in range(1, 17)]
SEARCH = "/api/v1/logs/search/"
INDEX_RE = re.compile(r"^torus-logs-(bench-search|bench-search-other)-\d{4}\.\d{2}\.\d{2}$")


# -- the data set: jobs, attempts and their log lines, all from the seed ------------------------


@dataclass
class AttemptPlan:
    number: int
    outcome: str  # ok, oom, nccl, node
    lines: int
    nodes: list[str]
    start: datetime | None = None
    end: datetime | None = None
    id: str = ""

    @property
    def state(self) -> str:
        return {"ok": "SUCCEEDED", "node": "NODE_FAIL"}.get(self.outcome, "FAILED")


@dataclass
class JobPlan:
    tag: str
    index: int
    project: str
    lines: int
    gpus: int
    attempts: list[AttemptPlan] = field(default_factory=list)
    duration_h: float = 1.0
    start_offset: float = 0.0  # fraction of the free part of the window before the job starts
    id: str = ""
    project_id: str = ""

    @property
    def name(self) -> str:
        return f"{self.tag}-{self.index:03d}"

    @property
    def state(self) -> str:
        return "SUCCEEDED" if self.attempts[-1].outcome == "ok" else "FAILED"


def plan_jobs(seed: int, slug: str, n_jobs: int, n_lines: int) -> list[JobPlan]:
    """Jobs of one tenant: sizes (log-normal), projects, attempts and how each ended."""
    rng = random.Random(f"{seed}:{slug}:plan")  # noqa: S311 (test data, not secrets)
    projects = PROJECTS[slug]
    weights = [rng.lognormvariate(0, 0.9) for _ in range(n_jobs)]
    counts = [max(60, int(n_lines * w / sum(weights))) for w in weights]
    counts[counts.index(max(counts))] += n_lines - sum(counts)
    tag = "bs" if slug == TENANT_SLUG else "bso"
    jobs = []
    for i, lines in enumerate(counts):
        project = rng.choices(projects, PROJECT_WEIGHTS[: len(projects)])[0]
        nodes = rng.choice([1, 1, 1, 2, 2, 4, 8])
        roll = rng.random()
        n_attempts = 1 if roll < 0.72 else 2 if roll < 0.94 else 3
        outcomes = [
            rng.choices(["oom", "nccl", "node"], [5, 3.5, 1.5])[0] for _ in range(n_attempts - 1)
        ]
        outcomes.append("ok" if rng.random() < 0.8 else rng.choice(["oom", "oom", "nccl"]))
        shares = [rng.uniform(0.2, 1.0) for _ in outcomes]
        split = [int(lines * s / sum(shares)) for s in shares]  # >= 60 * 0.2 / 3 each
        split[-1] += lines - sum(split)
        job = JobPlan(tag=tag, index=i, project=project, lines=lines, gpus=8 * nodes)
        job.duration_h = rng.uniform(1.0, 30.0)
        job.start_offset = rng.random()
        for number, (outcome, part) in enumerate(zip(outcomes, split, strict=True), start=1):
            job.attempts.append(
                AttemptPlan(
                    number=number, outcome=outcome, lines=part, nodes=rng.sample(NODES, nodes)
                )
            )
        jobs.append(job)
    return jobs


def place_in_time(jobs: list[JobPlan], anchor: datetime) -> None:
    """Each job somewhere in the DAYS before `anchor`, its attempts one after the other."""
    window = timedelta(days=DAYS) - timedelta(minutes=5)
    for job in jobs:
        duration = timedelta(hours=job.duration_h)
        start = anchor - window + (window - duration) * job.start_offset
        for attempt in job.attempts:
            attempt.start = start
            attempt.end = start + duration * attempt.lines / job.lines
            start = attempt.end + timedelta(minutes=2)


WARNINGS = [
    "UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed "
    "explicitly; in version 2.5 we will raise an exception if use_reentrant is not passed",
    "WARNING trainer: grad norm {g:.1f} exceeds max_norm 1.0; clipping",
    "NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory; retrying",
    "WARNING trainer: rank {r} is {s:.1f} s behind the slowest rank at the all-reduce",
    "WARNING amp: gradient overflow, loss scale reduced to {ls}",
    "WARNING data: dataloader worker {w} slow: batch took {ms} ms (prefetch queue empty)",
    "FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. "
    "Please use `torch.amp.GradScaler('cuda', args...)` instead.",
]
RARE_ERRORS = [
    "ERROR checkpoint: upload of step_{step:07d}.pt to object storage timed out; retrying "
    "(attempt {n}/5)",
    "ERROR data: corrupt sample skipped in shard-{w:05d}.tar (unexpected end of archive)",
    "ERROR metrics: could not reach the metrics endpoint (connection refused); dropping {n} points",
]


def traceback_event(frames: list[tuple[str, int, str, str]], last: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return "\n".join([*lines, last])


TRAIN_FRAMES = [
    ("/workspace/train.py", 412, "<module>", "main()"),
    ("/workspace/train.py", 388, "main", "trainer.fit(model, loader)"),
    ("/workspace/trainer.py", 219, "fit", "loss = self.train_step(batch)"),
]


def failure_events(rng, job: JobPlan, attempt: AttemptPlan, step: int) -> list:
    """The last lines of an attempt that failed, as (stream, text) pairs; `{stamp}` in a
    text is replaced by the line's time when it is written."""
    rank = rng.randrange(job.gpus)
    out = []
    if attempt.outcome == "oom":
        gib = rng.choice([1.0, 2.0, 3.5, 4.0, 8.0])
        detail = (
            f"Tried to allocate {gib:.2f} GiB. GPU {rank % 8} has a total capacity of 79.10 GiB "
            f"of which {rng.uniform(0.1, 2):.2f} GiB is free. Of the allocated memory "
            f"{rng.uniform(60, 75):.2f} GiB is allocated by PyTorch"
        )
        for r in sorted({rank, *rng.sample(range(job.gpus), min(job.gpus, rng.randrange(3)))}):
            out.append(
                ("stderr", f"{{stamp}} ERROR trainer: rank {r}: CUDA out of memory at step {step}")
            )
        frames = [
            *TRAIN_FRAMES,
            ("/workspace/trainer.py", 164, "train_step", "self.scaler.scale(loss).backward()"),
        ]
        last = f"torch.OutOfMemoryError: CUDA out of memory. {detail}"
        out.append(("stderr", traceback_event(frames, last)))
    elif attempt.outcome == "nccl":
        where = "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275"
        error = (
            f"NCCL error in: {where}, unhandled system error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.21.5"
        )
        out.append(("stderr", f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1316] {error}"))
        out.append(("stderr", f"{{stamp}} ERROR trainer: rank {rank}: NCCL error at step {step}"))
        frames = [
            *TRAIN_FRAMES,
            ("/workspace/trainer.py", 171, "train_step", "dist.all_reduce(grad_norm)"),
        ]
        out.append(
            ("stderr", traceback_event(frames, f"torch.distributed.DistBackendError: {error}"))
        )
    elif attempt.outcome == "node":
        node = attempt.nodes[-1]
        out.append(
            (
                "stderr",
                f"{{stamp}} ERROR torchrun: lost connection to {node} (no heartbeat for 60 s)",
            )
        )
        out.append(("stderr", f"srun: error: {node}: task {rank}: Killed"))
    out.append(("stderr", f"{{stamp}} ERROR torchrun: worker rank {rank} exited with code 1"))
    return out


def attempt_events(seed: int, job: JobPlan, attempt: AttemptPlan):
    """(timestamp, stream, text) of every log event of one attempt, in time order."""
    rng = random.Random(f"{seed}:{job.name}:{attempt.number}")  # noqa: S311
    n = attempt.lines
    span = (attempt.end - attempt.start).total_seconds()
    total_steps = max(1000, job.lines * 2)
    step = int(total_steps * (attempt.number - 1) / (len(job.attempts) + 1))
    clock = {"t": attempt.start}

    def stamp() -> str:
        t = clock["t"]
        return f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}"

    tail = []
    if attempt.outcome != "ok":
        tail = failure_events(rng, job, attempt, step)[: max(0, n - 1)]
    body = n - len(tail)
    world = job.gpus
    for k in range(n):
        clock["t"] = attempt.start + timedelta(seconds=span * k / n + rng.random() * 0.001)
        if k >= body:
            stream, text = tail[k - body]
            yield clock["t"], stream, text.replace("{stamp}", stamp())
            continue
        r = rng.random()
        if r < 0.60:
            step += 1
            loss = 2.4 * math.exp(-step / 40000) + 0.9 + rng.gauss(0, 0.03)
            text = (
                f"{stamp()} INFO trainer: step {step}/{total_steps} | epoch {step // 5000} | "
                f"loss {loss:.4f} | lr {3e-4 * min(1, step / 2000):.2e} | "
                f"grad_norm {abs(rng.gauss(0.9, 0.3)):.3f} | {rng.randrange(38000, 52000)} tok/s"
            )
            yield clock["t"], "stdout", text
        elif r < 0.70:
            loss = 2.4 * math.exp(-step / 40000) + 0.9 + rng.gauss(0, 0.03)
            sps = rng.uniform(480, 540) * world
            text = f"torus-metric step={step} loss={loss:.4f} samples_per_sec={sps:.1f}"
            yield clock["t"], "stdout", text
        elif r < 0.78:
            done = step % 5000
            text = (
                f"Epoch {step // 5000}: {done * 100 // 5000:3d}%|{'#' * (done * 20 // 5000):<20}| "
                f"{done}/5000 [{rng.randrange(10, 59):02d}:{rng.randrange(60):02d}<"
                f"{rng.randrange(10, 59):02d}:{rng.randrange(60):02d}, {rng.uniform(3, 6):.2f}it/s]"
            )
            yield clock["t"], "stdout", text
        elif r < 0.83:
            alloc = rng.uniform(50, 72)
            reserved, peak = alloc + rng.uniform(1, 6), alloc + rng.uniform(0, 5)
            text = (
                f"{stamp()} DEBUG memory: rank {rng.randrange(world)} allocated {alloc:.1f} GiB "
                f"reserved {reserved:.1f} GiB peak {peak:.1f} GiB"
            )
            yield clock["t"], "stdout", text
        elif r < 0.88:
            text = (
                f"{stamp()} INFO data: rank {rng.randrange(world)} dataloader worker "
                f"{rng.randrange(8)} prefetched {rng.randrange(2, 16)} batches "
                f"({rng.randrange(3, 90)} ms)"
            )
            yield clock["t"], "stdout", text
        elif r < 0.91:
            vl = 2.4 * math.exp(-step / 40000) + 0.95 + rng.gauss(0, 0.02)
            text = (
                f"{stamp()} INFO eval: step {step} val_loss {vl:.4f} "
                f"accuracy {rng.uniform(0.4, 0.8):.3f} perplexity {math.exp(vl):.2f}"
            )
            yield clock["t"], "stdout", text
        elif r < 0.92:
            text = (
                f"{stamp()} INFO checkpoint: saving checkpoint to /checkpoints/{job.project}/"
                f"{job.name}/step_{step:07d}.pt ({rng.randrange(900, 16000)} MB, "
                f"{rng.uniform(2, 40):.1f} s)"
            )
            yield clock["t"], "stdout", text
        elif r < 0.9985:
            warning = rng.choice(WARNINGS).format(
                g=rng.uniform(1.5, 40),
                r=rng.randrange(world),
                s=rng.uniform(0.5, 9),
                ls=2 ** rng.randrange(8, 16),
                w=rng.randrange(8),
                ms=rng.randrange(300, 4000),
            )
            if warning.startswith("WARNING"):  # a logger line; the others are bare prints
                warning = f"{stamp()} {warning}"
            yield clock["t"], "stderr", warning
        elif r < 0.9997:
            error = rng.choice(RARE_ERRORS).format(
                step=step, n=rng.randrange(1, 5), w=rng.randrange(4096)
            )
            yield clock["t"], "stderr", f"{stamp()} {error}"
        else:  # a recoverable OOM: the micro-batch is retried smaller
            text = (
                f"{stamp()} WARNING trainer: CUDA out of memory on micro-batch at step {step}; "
                "retrying with half the micro-batch size"
            )
            yield clock["t"], "stderr", text


def documents(seed: int, tenant, jobs: list[JobPlan]):
    """Index actions shaped exactly like the shipper's (apps/logs/shipper.py::_bulk)."""
    from apps.logs.es import index_name
    from apps.logs.parsing import _level

    tenant_id, slug = str(tenant.id), tenant.slug
    for job in jobs:
        for attempt in job.attempts:
            offsets = {"stdout": 0, "stderr": 0}
            node = attempt.nodes[0] if attempt.nodes else ""
            for stamp, stream, text in attempt_events(seed, job, attempt):
                offset = offsets[stream]
                offsets[stream] += len(text.encode()) + 1
                doc = {
                    "tenant": tenant_id,
                    "project": job.project_id,
                    "job": job.id,
                    "attempt": attempt.id,
                    "attempt_number": attempt.number,
                    "stream": stream,
                    "node": node,
                    "offset": offset,
                    "timestamp": stamp.isoformat(),
                    "message": text,
                    "truncated": False,
                }
                level = _level(text.encode())
                if level:
                    doc["level"] = level
                yield {
                    "_op_type": "index",
                    "_index": index_name(slug, stamp),
                    "_id": f"{attempt.id}:{stream}:{offset}",
                    "_source": doc,
                }
