"""Log-search benchmark: p50/p95 of `GET /api/v1/logs/search/` over at least 1,000,000
indexed log lines, beside the very same Elasticsearch requests sent to Elasticsearch directly;
the ratio of the two is the API's overhead.

Run alone:  .venv/bin/python bench/search.py [--quick] [--lines N] [--queries K] [--reload]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "search", "metrics": {...}, "peers": {...}, "ratios": {...}}

It uses the real `torus` database (tenants `bench-search` and `bench-search-other`, their
projects and job rows) and the platform's Elasticsearch (indices
`torus-logs-bench-search-YYYY.MM.DD` and `torus-logs-bench-search-other-YYYY.MM.DD`, kept
between runs unless --drop), and starts its own uvicorn on a free port with
TORUS_REDIS_DB_BASE=4. See bench/README.md.
"""

import argparse
import contextlib
import hashlib
import json
import math
import random
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    SectionTimer,
    django_setup,
    ensure_tenant,
    environment,
    finish,
    manage,
    percentiles,
)
from _common import log as _log

from scripts.devstack import start_relay, start_web, stop_all


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


# -- database rows: tenants, projects, jobs, attempts -------------------------------------------


def ensure_rows(seed: int, lines: dict[str, int]) -> dict:
    """Both tenants with their projects, and one Job row (+ attempts) per planned job; ids
    are looked up by name, so a rerun finds the same rows (and the same document ids)."""
    from apps.jobs.models import Job, JobAttempt
    from apps.jobs.spec import JobSpecSerializer, normalise, totals
    from apps.tenancy.models import Project, Tenant

    main = ensure_tenant(
        slug=TENANT_SLUG, project_slug=PROJECTS[TENANT_SLUG][0], owner=OWNER, token_name=TOKEN_NAME
    )
    other = ensure_tenant(
        slug=OTHER_SLUG,
        project_slug=PROJECTS[OTHER_SLUG][0],
        owner=OTHER_OWNER,
        token_name=f"{TOKEN_NAME}-other",
    )
    Tenant.objects.filter(slug__in=[TENANT_SLUG, OTHER_SLUG]).update(
        log_retention_days=RETENTION_DAYS
    )
    out = {"main": main, "other": other, "plans": {}}
    for ctx, slug in ((main, TENANT_SLUG), (other, OTHER_SLUG)):
        tenant = ctx["tenant"]
        projects = {}
        for project_slug in PROJECTS[slug]:
            project, _ = Project.objects.get_or_create(
                tenant=tenant, slug=project_slug, defaults={"name": f"Benchmark {project_slug}"}
            )
            projects[project_slug] = project
        plans = plan_jobs(seed, slug, max(1, min(JOBS[slug], lines[slug] // 1000)), lines[slug])
        existing = {}
        for job in Job.objects.filter(tenant=tenant).order_by("created_at"):
            existing.setdefault(job.name, job)
        for plan in plans:
            project = projects[plan.project]
            row = existing.get(plan.name)
            if row is None:
                data = {
                    "project": str(project.id),
                    "name": plan.name,
                    "command": ["python", "train.py"],
                    "resources": {"nodes": plan.gpus // 8, "gpus_per_node": 8},
                }
                serializer = JobSpecSerializer(data=data)
                serializer.is_valid(raise_exception=True)
                spec = normalise(dict(serializer.validated_data))
                row = Job.objects.create(
                    tenant=tenant,
                    project=project,
                    user=ctx["user"],
                    name=plan.name,
                    spec=spec,
                    state=plan.state,
                    cluster=ctx["cluster"],
                    priority=spec["priority"],
                    labels=spec["labels"],
                    **totals(spec),
                )
            elif row.project_id != project.id or row.state != plan.state:
                Job.objects.filter(pk=row.pk).update(project=project, state=plan.state)
            plan.id, plan.project_id = str(row.pk), str(project.id)
            attempts = {a.number: a for a in JobAttempt.objects.filter(job_id=row.pk)}
            for attempt in plan.attempts:
                found = attempts.get(attempt.number)
                if found is None:
                    found = JobAttempt.objects.create(
                        job_id=row.pk,
                        number=attempt.number,
                        state=attempt.state,
                        nodes=attempt.nodes,
                    )
                elif found.state != attempt.state or found.nodes != attempt.nodes:
                    JobAttempt.objects.filter(pk=found.pk).update(
                        state=attempt.state, nodes=attempt.nodes
                    )
                attempt.id = str(found.pk)
            JobAttempt.objects.filter(job_id=row.pk, number__gt=len(plan.attempts)).delete()
        out["plans"][slug] = plans
        ctx["projects"] = projects
    return out


def signature(seed: int, lines: dict[str, int], rows: dict) -> str:
    """What the stored documents depend on: a different value means reload."""
    parts = {
        "version": GEN_VERSION,
        "seed": seed,
        "lines": lines,
        "tenants": [str(rows["main"]["tenant"].id), str(rows["other"]["tenant"].id)],
        "attempts": sorted(
            f"{job.project_id}/{job.id}/{a.id}"
            for plans in rows["plans"].values()
            for job in plans
            for a in job.attempts
        ),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


# -- Elasticsearch: our indices, loading, reuse -------------------------------------------------


def wait_es(es, timeout: float = 300) -> None:
    """Until Elasticsearch answers (a test suite sharing the machine may restart it)."""
    from elasticsearch import ApiError, TransportError

    deadline = time.monotonic() + timeout
    while True:
        try:
            es.cluster.health(wait_for_status="yellow", timeout="30s")
            return
        except (ApiError, TransportError) as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Elasticsearch did not answer for {timeout:.0f} s") from exc
            log(f"waiting for Elasticsearch ({type(exc).__name__})")
            time.sleep(5)


def our_indices(es) -> list[str]:
    names = es.indices.get(
        index="torus-logs-bench-search-*", allow_no_indices=True, ignore_unavailable=True
    )
    return sorted(name for name in names if INDEX_RE.match(name))


def drop_indices(es) -> list[str]:
    names = our_indices(es)
    for name in names:  # by full name: action.destructive_requires_name refuses wildcards
        es.indices.delete(index=name)
    return names


def stored_set(es, sig: str, lines: dict[str, int]) -> dict | None:
    """The meta of the stored data set when the indices hold exactly it, else None."""
    names = our_indices(es)
    if not names:
        return None
    mappings = es.indices.get_mapping(index=",".join(names))
    metas = [mappings[name]["mappings"].get("_meta", {}).get("torus_bench") for name in names]
    if any(not meta or meta.get("signature") != sig for meta in metas):
        return None
    es.indices.refresh(index=",".join(names))
    per_tenant = dict.fromkeys(lines, 0)
    for name, meta in zip(names, metas, strict=True):
        count = es.count(index=name)["count"]
        if count != meta["docs"]:
            return None
        per_tenant[meta["tenant"]] = per_tenant.get(meta["tenant"], 0) + count
    if per_tenant != lines:
        return None
    return metas[0]


def load(es, seed: int, rows: dict, anchor: datetime, sig: str) -> dict:
    """Delete our indices, then index every document (parallel bulk, deterministic ids)."""
    from elasticsearch import helpers

    from apps.logs.index import template_install

    dropped = drop_indices(es)
    if dropped:
        log(f"deleted {len(dropped)} stale bench indices")
    template_install()
    per_index: dict[str, int] = {}
    started = time.monotonic()
    last = started
    done = 0
    bulk_client = es.options(request_timeout=300)

    def actions():
        for ctx, slug in ((rows["main"], TENANT_SLUG), (rows["other"], OTHER_SLUG)):
            plans = rows["plans"][slug]
            place_in_time(plans, anchor)
            for action in documents(seed, ctx["tenant"], plans):
                per_index[action["_index"]] = per_index.get(action["_index"], 0) + 1
                yield action

    for ok, item in helpers.parallel_bulk(
        bulk_client, actions(), thread_count=2, chunk_size=2000, queue_size=4
    ):
        if not ok:
            raise RuntimeError(f"bulk item failed: {item}")
        done += 1
        now = time.monotonic()
        if now - last >= 15:
            log(f"  loaded {done:,} documents ({done / (now - started):,.0f}/s)")
            last = now
    indexed_s = time.monotonic() - started
    names = sorted(per_index)
    es.indices.refresh(index=",".join(names))
    seconds = time.monotonic() - started
    for name in names:
        tenant = OTHER_SLUG if name.startswith(f"torus-logs-{OTHER_SLUG}-") else TENANT_SLUG
        meta = {
            "signature": sig,
            "tenant": tenant,
            "docs": per_index[name],
            "anchor": anchor.isoformat(),
            "seed": seed,
        }
        es.indices.put_mapping(index=name, meta={"torus_bench": meta})
    log(f"loaded {done:,} documents into {len(names)} indices in {seconds:.1f} s")
    return {
        "reused": False,
        "documents": done,
        "seconds": round(seconds, 1),
        "bulk_seconds": round(indexed_s, 1),
        "docs_per_second": round(done / seconds),
    }


def index_sizes(es) -> dict:
    rows = es.cat.indices(
        index=",".join(our_indices(es)), format="json", bytes="b", h="index,docs.count,store.size"
    ).body
    out = {}
    for slug in (TENANT_SLUG, OTHER_SLUG):
        mine = [r for r in rows if re.match(rf"^torus-logs-{slug}-\d", r["index"])]
        out[slug] = {
            "indices": len(mine),
            "docs": sum(int(r["docs.count"]) for r in mine),
            "store_mb": round(sum(int(r["store.size"]) for r in mine) / 2**20, 1),
        }
    return out


# -- the queries ---------------------------------------------------------------------------------


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def query_set(rows: dict, anchor: datetime) -> dict[str, dict]:
    main = rows["main"]
    plans = rows["plans"][TENANT_SLUG]
    llm = str(main["projects"]["llm"].id)
    biggest = max(plans, key=lambda p: (p.project == "llm", p.lines))
    day, week = iso(anchor - timedelta(days=1)), iso(anchor - timedelta(days=DAYS))
    return {
        "rare_phrase": {"q": '"CUDA out of memory"'},
        "common_term_project": {"q": "loss", "project": llm},
        "errors_last_day": {"level": "ERROR,CRITICAL", "since": day, "until": iso(anchor)},
        "job_term": {"q": "checkpoint", "job": biggest.id},
        "histogram_range": {"q": "NCCL", "histogram": "1", "since": week, "until": iso(anchor)},
        "histogram_auto": {"q": '"CUDA out of memory" | "NCCL error"', "histogram": "1"},
        "newest_page2": {"size": "100"},  # `after` is added from page 1 (search_after)
    }


def capture(client, token: str, params: dict) -> tuple[dict, list]:
    """One request through Django in this process: its JSON and every Elasticsearch request
    (indices, body) that log_search sent, to replay them to Elasticsearch directly."""
    import apps.logs.search as search

    calls = []
    original = search._search

    def recording(indices, body):
        calls.append((indices, json.loads(json.dumps(body))))
        return original(indices, body)

    search._search = recording
    try:
        response = client.get(SEARCH, params, HTTP_AUTHORIZATION=f"Bearer {token}")
    finally:
        search._search = original
    if response.status_code != 200:
        raise RuntimeError(f"in-process search {params}: {response.status_code} {response.content}")
    return response.json(), calls


def es_replay(es_http, calls: list) -> tuple[float, list]:
    started = time.perf_counter()
    bodies = []
    for path, payload in calls:
        response = es_http.post(
            path,
            params={"ignore_unavailable": "true", "allow_no_indices": "true"},
            content=payload,
            headers={"Content-Type": "application/json"},
        )
        bodies.append(response)
    took = (time.perf_counter() - started) * 1000
    for response in bodies:
        if response.status_code != 200:
            raise RuntimeError(f"Elasticsearch {response.status_code}: {response.text[:300]}")
    return took, [response.json() for response in bodies]


def check_same(name: str, api: dict, direct: list, size: int) -> None:
    """API and direct answers agree: total, hit ids in order, histogram counts."""
    first = direct[0]
    total = first["hits"]["total"]["value"]
    if api["total"] != total:
        raise AssertionError(f"{name}: API total {api['total']} != Elasticsearch total {total}")
    direct_ids = [hit["_id"] for hit in first["hits"]["hits"][:size]]
    if [hit["id"] for hit in api["hits"]] != direct_ids:
        raise AssertionError(f"{name}: API hits differ from Elasticsearch's")
    if api.get("histogram"):
        buckets = direct[-1]["aggregations"]["histogram"]["buckets"]
        if [b["count"] for b in api["histogram"]] != [b["doc_count"] for b in buckets]:
            raise AssertionError(f"{name}: histogram differs from Elasticsearch's")


def check_tenant(name: str, api: dict, mine: set[str], foreign: set[str]) -> None:
    for hit in api["hits"]:
        if hit["attempt"] in foreign:
            raise AssertionError(f"{name}: the other tenant's line {hit['id']} came back")
        if hit["attempt"] not in mine:
            raise AssertionError(f"{name}: unknown line {hit['id']} came back")


def floors(api_http, k: int, warmup: int) -> dict:
    """What every request pays before any search, over the same connection: `GET /healthz`
    (HTTP, ASGI, middleware; no auth, no database) and `GET /api/v1/logs/search/?size=0`
    (the same plus DRF, token authentication, throttle and parameter validation: a 400)."""
    out: dict[str, list] = {"healthz": [], "search_400": []}
    for i in range(warmup + k):
        for name, path in (("healthz", "/healthz"), ("search_400", f"{SEARCH}?size=0")):
            started = time.perf_counter()
            response = api_http.get(path)
            took = (time.perf_counter() - started) * 1000
            expected = 200 if name == "healthz" else 400
            if response.status_code != expected:
                raise RuntimeError(f"{path}: {response.status_code} {response.text[:200]}")
            if i >= warmup:
                out[name].append(took)
    result = {f"{name}_ms": percentiles(values) for name, values in out.items()}
    log(
        f"floors: /healthz p50 {result['healthz_ms']['p50']} ms, search 400 (auth, throttle, "
        f"validation) p50 {result['search_400_ms']['p50']} ms"
    )
    return result


def relay_floor(es_http, captured: dict, k: int, logdir: Path) -> dict:
    """Every query's recorded requests straight to Elasticsearch and through HAProxy in `mode
    http` in front of it (the connection kept on both sides), alternating: what one more HTTP
    hop costs here with no work of ours in it, beside what the API adds."""
    import httpx
    from django.conf import settings

    es_url = httpx.URL(settings.TORUS_ELASTICSEARCH_URL)
    proc, port = start_relay(es_url.port, logdir, mode="http", check="/_cluster/health")
    direct, relayed = [], []
    limits = httpx.Limits(max_keepalive_connections=1, max_connections=1)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits) as relay:
        for calls in captured.values():
            payloads = [
                (f"/{indices}/_search", json.dumps(body, separators=(",", ":")).encode())
                for indices, body in calls
            ]
            for i in range(k + 2):
                for side in ("es", "relay") if i % 2 == 0 else ("relay", "es"):
                    took, _ = es_replay(es_http if side == "es" else relay, payloads)
                    if i >= 2:
                        (direct if side == "es" else relayed).append(took)
    proc.stop()
    d, r = percentiles(direct), percentiles(relayed)
    out = {
        "direct_ms": d,
        "relay_ms": r,
        "relay_vs_es_p50": round(r["p50"] / d["p50"], 3),
        "relay_vs_es_p95": round(r["p95"] / d["p95"], 3),
    }
    log(f"one more hop (HAProxy): p50 {d['p50']} -> {r['p50']} ms, x{out['relay_vs_es_p50']}")
    return out


def measure(api_http, es_http, name, params, calls, k, warmup, size, mine, foreign) -> dict:
    payloads = [
        (f"/{indices}/_search", json.dumps(body, separators=(",", ":")).encode())
        for indices, body in calls
    ]
    api_ms, es_ms, es_took, api_took = [], [], [], []
    for i in range(warmup + k):
        order = ("api", "es") if i % 2 == 0 else ("es", "api")
        for side in order:
            if side == "api":
                started = time.perf_counter()
                response = api_http.get(SEARCH, params=params)
                took = (time.perf_counter() - started) * 1000
                if response.status_code != 200:
                    raise RuntimeError(f"{name}: API {response.status_code}: {response.text[:300]}")
                api = response.json()
                if i >= warmup:
                    api_ms.append(took)
                    api_took.append(api["took_ms"])
            else:
                took, direct = es_replay(es_http, payloads)
                if i >= warmup:
                    es_ms.append(took)
                    es_took.append(sum(body["took"] for body in direct))
        check_same(name, api, direct, size)
        check_tenant(name, api, mine, foreign)
    a, e = percentiles(api_ms), percentiles(es_ms)
    out = {
        "params": {key: value for key, value in params.items() if key != "after"}
        | ({"after": "<page 1 next>"} if "after" in params else {}),
        "es_requests": len(calls),
        "total": api["total"],
        "hits": len(api["hits"]),
        "api_ms": a,
        "es_ms": e,
        "es_took_ms": percentiles(es_took),
        "api_reported_took_ms": percentiles(api_took),
        "overhead_ms_p50": round(a["p50"] - e["p50"], 2),
        "api_vs_es_p50": round(a["p50"] / e["p50"], 3),
        "api_vs_es_p95": round(a["p95"] / e["p95"], 3),
        "_api": api_ms,
        "_es": es_ms,
    }
    log(
        f"{name:>20}: total {api['total']:>8,}  API p50 {a['p50']:7.2f} p95 {a['p95']:7.2f} ms"
        f"  | ES p50 {e['p50']:7.2f} p95 {e['p95']:7.2f} ms  (took p50 "
        f"{out['es_took_ms']['p50']})  x{out['api_vs_es_p50']}"
    )
    return out


def plain_http_ab(logdir, api_http, token, queries, k: int) -> dict:
    """The same API requests to the benchmark's uvicorn (the hot routes through Django's WSGI
    handler, apps/core/plain_http.py) and to a second one with TORUS_PLAIN_HTTP_THREADS=0
    (everything through Django's ASGI handler), alternating, in the same run."""
    import httpx

    other, port = start_web(logdir, name="web-asgi-only", env={"TORUS_PLAIN_HTTP_THREADS": "0"})
    times: dict[str, list] = {"wsgi": [], "asgi": []}
    limits = httpx.Limits(max_keepalive_connections=1, max_connections=1)
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        limits=limits,
    ) as asgi_http:
        clients = {"wsgi": api_http, "asgi": asgi_http}
        for i in range(k + 3):
            for name, params in queries.items():
                for side in ("wsgi", "asgi") if i % 2 == 0 else ("asgi", "wsgi"):
                    started = time.perf_counter()
                    response = clients[side].get(SEARCH, params=params)
                    took = (time.perf_counter() - started) * 1000
                    if response.status_code != 200:
                        raise RuntimeError(f"{side} {name}: {response.status_code}")
                    if i >= 3:
                        times[side].append(took)
    other.stop()
    out = {f"{side}_ms": percentiles(values) for side, values in times.items()}
    out["asgi_minus_wsgi_p50_ms"] = round(out["asgi_ms"]["p50"] - out["wsgi_ms"]["p50"], 2)
    log(f"plain HTTP A/B (all queries): {json.dumps(out)}")
    return out


# -- profile: where an API request's time goes (in-process) ------------------------------------


def handler_comparison(token: str, queries: dict, k: int) -> dict:
    """The same requests in this process through Django's test Client (the sync handler, as
    under WSGI) and its AsyncClient (the ASGI handler uvicorn runs), alternately: the ASGI
    handler's own share of the overhead, without HTTP or a second process."""
    import asyncio

    from django.test import AsyncClient, Client

    sync_client, async_client = Client(), AsyncClient()
    loop = asyncio.new_event_loop()
    walls: dict[str, list] = {"sync_handler": [], "asgi_handler": []}
    try:
        for params in queries.values():
            for i in range(k):
                for name in ("sync_handler", "asgi_handler")[:: 1 if i % 2 == 0 else -1]:
                    started = time.perf_counter()
                    if name == "sync_handler":
                        response = sync_client.get(
                            SEARCH, params, HTTP_AUTHORIZATION=f"Bearer {token}"
                        )
                    else:
                        response = loop.run_until_complete(
                            async_client.get(
                                SEARCH, params, headers={"Authorization": f"Bearer {token}"}
                            )
                        )
                    walls[name].append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200, response.content[:300]
    finally:
        loop.close()
    out = {f"{name}_ms": percentiles(values) for name, values in walls.items()}
    out["asgi_minus_sync_p50_ms"] = round(
        out["asgi_handler_ms"]["p50"] - out["sync_handler_ms"]["p50"], 2
    )
    log(f"in-process handlers: {json.dumps(out)}")
    return out


def profile_requests(token: str, queries: dict, k: int) -> dict:
    """k requests per query through Django's full stack in this process, timed by section
    (inclusive), every SQL statement counted and timed."""
    from django.db import connection
    from django.test import Client

    import apps.logs.api.views as views
    import apps.logs.search as search
    import apps.tenancy.authentication as authentication
    from apps.core.api.renderers import JSONRenderer
    from apps.core.api.throttling import PrincipalRateThrottle

    timer = SectionTimer()
    totals, sql, timed, sql_wrapper = timer.totals, timer.sql, timer.timed, timer.sql_wrapper
    es_took = []

    def search_recording(indices, body):
        result = original_search(indices, body)
        es_took.append(result.get("took", 0))
        return result

    original_search = search._search
    patches = [
        (authentication, "token_lookup", None),
        (views, "actor_for", None),
        (views, "log_search", "log_search (all)"),
        (search, "_tenant_scope", None),
        (search, "_object_filters", None),
        (search, "_search", "_search (Elasticsearch round trip)"),
        (search, "_line", "_line (per hit, summed)"),
        (views.LogSearchQuerySerializer, "is_valid", "params serializer"),
        (authentication.BearerTokenAuthentication, "_record_use", None),
        (PrincipalRateThrottle, "allow_request", "throttle (redis)"),
        (JSONRenderer, "render", "JSON render"),
    ]
    saved = []
    for owner, attr, label in patches:
        own = attr in vars(owner)
        fn = vars(owner)[attr] if own else getattr(owner, attr)
        saved.append((owner, attr, own, fn))
        wrapped = search_recording if attr == "_search" else fn
        is_static = isinstance(fn, staticmethod)
        if is_static:
            wrapped = fn.__func__
        new = timed(label or f"{attr}", wrapped)
        setattr(owner, attr, staticmethod(new) if is_static else new)
    client = Client()
    per_query = {}
    all_wall = []
    try:
        with connection.execute_wrapper(sql_wrapper):
            for name, params in queries.items():
                wall = []
                for _ in range(k):
                    started = time.perf_counter()
                    response = client.get(SEARCH, params, HTTP_AUTHORIZATION=f"Bearer {token}")
                    wall.append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200, response.content[:300]
                per_query[name] = percentiles(wall)["p50"]
                all_wall += wall
    finally:
        for owner, attr, own, fn in saved:
            if own:
                setattr(owner, attr, fn)
            else:
                delattr(owner, attr)
    n = k * len(queries)
    per = {name: round(v / n * 1000, 2) for name, v in sorted(totals.items(), key=lambda x: -x[1])}
    wall_mean = sum(all_wall) / n
    es_round_trip = per.get("_search (Elasticsearch round trip)", 0.0)
    took = sum(es_took) / n
    out = {
        "requests": n,
        "split_ms_per_request": {
            "elasticsearch_took": round(took, 2),
            "elasticsearch_client_http_and_json": round(es_round_trip - took, 2),
            "outside_elasticsearch": round(wall_mean - es_round_trip, 2),
            "of_which_sql": round(sum(s for _, s in sql.values()) / n * 1000, 2),
        },
        "in_process_request_ms": percentiles(all_wall),
        "in_process_request_ms_p50_by_query": per_query,
        "inclusive_ms_per_request": per,
        "es_took_ms_per_request": round(sum(es_took) / n, 2),
        "sql_per_request_by_innermost_section": {
            name: {"queries": round(c / n, 2), "ms": round(s / n * 1000, 2)}
            for name, (c, s) in sql.items()
        },
        "sql_queries_per_request": round(sum(c for c, _ in sql.values()) / n, 2),
        "sql_ms_per_request": round(sum(s for _, s in sql.values()) / n * 1000, 2),
    }
    log(f"profile ({n} in-process requests): {json.dumps(out)}")
    return out


# -- main ------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200,000 lines, 20 iterations")
    parser.add_argument("--lines", type=int, help="lines of the bench tenant (default 1,000,000)")
    parser.add_argument("--other-lines", type=int, help="lines of the other tenant (lines/5)")
    parser.add_argument("--queries", type=int, help="timed iterations per query (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations per query")
    parser.add_argument("--profile-requests", type=int, default=20, help="per query, in-process")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reload", action="store_true", help="index the documents again")
    parser.add_argument("--drop", action="store_true", help="delete the bench indices at the end")
    parser.add_argument("--drop-only", action="store_true", help="delete them and exit")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary log folder")
    args, unknown = parser.parse_known_args()  # run_all passes its arguments to every script
    if unknown:
        log(f"ignoring arguments meant for other benchmarks: {' '.join(unknown)}")
    n_lines = args.lines or (200_000 if args.quick else 1_000_000)
    if n_lines < 10_000 or (args.other_lines is not None and args.other_lines < 1_000):
        parser.error("--lines must be at least 10,000 and --other-lines at least 1,000")
    lines = {TENANT_SLUG: n_lines, OTHER_SLUG: args.other_lines or n_lines // 5}
    k = args.queries or (20 if args.quick else 50)
    logdir = Path(tempfile.mkdtemp(prefix="torus-bench-search-"))

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result = None
    es = None
    try:
        manage("migrate", "--noinput", "--verbosity", "0")
        django_setup()
        import httpx
        from django.conf import settings
        from django.test import Client
        from elasticsearch import ApiError, TransportError
        from elasticsearch.helpers import BulkIndexError

        from apps.logs.es import client as es_client

        es = es_client()
        wait_es(es)
        if args.drop_only:
            log(f"deleted {len(drop_indices(es))} bench indices")
            return 0
        env_start = environment()
        run_started = time.monotonic()

        # ---- data set (not timed): rows, then the documents unless already stored
        rows = ensure_rows(args.seed, lines)
        token = rows["main"]["token"]
        sig = signature(args.seed, lines, rows)
        meta = None if args.reload else stored_set(es, sig, lines)
        if meta is not None:
            anchor = datetime.fromisoformat(meta["anchor"])
            loading = {"reused": True, "documents": sum(lines.values())}
            log(f"reusing the stored {sum(lines.values()):,} documents (loaded for {anchor})")
        else:
            anchor = datetime.now(UTC).replace(second=0, microsecond=0)
            log(f"indexing {lines[TENANT_SLUG]:,} + {lines[OTHER_SLUG]:,} documents ...")
            for attempt in range(3):  # Elasticsearch restarted under us: load again
                try:
                    loading = load(es, args.seed, rows, anchor, sig)
                    break
                except (ApiError, TransportError, BulkIndexError) as exc:
                    if attempt == 2:
                        raise
                    log(f"loading failed ({type(exc).__name__}: {str(exc)[:200]}); again")
                    wait_es(es)
        sizes = index_sizes(es)
        log(f"indices: {json.dumps(sizes)}")
        for slug, want in lines.items():
            if sizes[slug]["docs"] != want:
                raise AssertionError(f"{slug}: {sizes[slug]['docs']} documents, expected {want}")

        mine = {a.id for job in rows["plans"][TENANT_SLUG] for a in job.attempts}
        foreign = {a.id for job in rows["plans"][OTHER_SLUG] for a in job.attempts}
        queries = query_set(rows, anchor)

        # ---- the exact Elasticsearch requests behind each API query (in-process capture)
        django_client = Client()
        first_page, _ = capture(django_client, token, {"size": "100"})
        if not first_page["next"]:
            raise AssertionError("no second page of the newest lines")
        queries["newest_page2"]["after"] = first_page["next"]
        captured = {}
        for name, params in queries.items():
            body, calls = capture(django_client, token, params)
            if body["total"] == 0:
                log(f"warning: {name} matches nothing in this data set")
            captured[name] = calls
            log(f"{name}: {len(calls)} Elasticsearch request(s), total {body['total']:,}")

        # the tenant filter has work: the index pattern alone also matches the other tenant
        indices, body = captured["rare_phrase"][0]
        unfiltered = {**body, "query": {"bool": {"must": body["query"]["bool"]["must"]}}}
        pattern_total = es.search(
            index=indices, ignore_unavailable=True, allow_no_indices=True, **unfiltered
        )["hits"]["total"]["value"]
        other_token = rows["other"]["token"]
        other_view, _ = capture(django_client, other_token, queries["rare_phrase"])
        check_tenant("other tenant's view", other_view, foreign, mine)
        rare_total, _ = capture(django_client, token, queries["rare_phrase"])
        if pattern_total != rare_total["total"] + other_view["total"]:
            raise AssertionError(
                f"tenant split: pattern {pattern_total} != {rare_total['total']} + "
                f"{other_view['total']}"
            )
        log(
            f"index pattern {indices} alone: {pattern_total} rare-phrase lines; the tenant "
            f"filter keeps {rare_total['total']} ({other_view['total']} are the other tenant's)"
        )

        # ---- timed: API over HTTP (uvicorn, keep-alive) vs the same requests to Elasticsearch
        web, port = start_web(logdir, workers=1)
        results = {}
        limits = httpx.Limits(max_keepalive_connections=1, max_connections=1)
        with (
            httpx.Client(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
                limits=limits,
            ) as api_http,
            httpx.Client(
                base_url=settings.TORUS_ELASTICSEARCH_URL.rstrip("/"), timeout=60, limits=limits
            ) as es_http,
        ):
            log(f"{k} timed iterations per query after {args.warmup} warm-up ones")
            for name, params in queries.items():
                size = int(params.get("size", 50))
                results[name] = measure(
                    api_http, es_http, name, params, captured[name], k, args.warmup, size,
                    mine, foreign,
                )  # fmt: skip
            floor = floors(api_http, k, args.warmup)
            relay = relay_floor(es_http, captured, k, logdir)
            plain = plain_http_ab(logdir, api_http, token, queries, k)
        web.stop()

        profile = profile_requests(token, queries, args.profile_requests)
        profile["handlers"] = handler_comparison(token, queries, args.profile_requests)
        api_all = [v for r in results.values() for v in r.pop("_api")]
        es_all = [v for r in results.values() for v in r.pop("_es")]
        api_p, es_p = percentiles(api_all), percentiles(es_all)
        metrics = {
            "lines": lines[TENANT_SLUG],
            "other_tenant_lines": lines[OTHER_SLUG],
            "indexed_documents": sum(s["docs"] for s in sizes.values()),
            "indices": sizes,
            "store_mb": round(sum(s["store_mb"] for s in sizes.values()), 1),
            "loading": loading,
            "iterations_per_query": k,
            "warmup_per_query": args.warmup,
            "uvicorn_workers": 1,
            "api_ms": api_p,
            "es_ms": es_p,
            "overhead_ms_p50": round(api_p["p50"] - es_p["p50"], 2),
            "floors": floor,
            "relay": relay,
            "plain_http": plain,
            "queries": results,
            "tenant_filter": {
                "rare_phrase_lines_matching_index_pattern": pattern_total,
                "rare_phrase_lines_of_tenant": rare_total["total"],
                "rare_phrase_lines_of_other_tenant_excluded": other_view["total"],
                "foreign_hits_returned": 0,
            },
            "profile": profile,
            "environment_start": env_start,
            "environment_end": environment(),
            "run_seconds": round(time.monotonic() - run_started, 1),
        }
        peers = {
            "elasticsearch_direct_ms": es_p,
            "elasticsearch_through_haproxy_ms": relay["relay_ms"],
            "elasticsearch_direct_ms_by_query": {n: r["es_ms"] for n, r in results.items()},
            "elasticsearch_took_ms_by_query": {n: r["es_took_ms"] for n, r in results.items()},
        }
        ratios = {
            "api_vs_es_p50": round(api_p["p50"] / es_p["p50"], 3),
            "api_vs_es_p95": round(api_p["p95"] / es_p["p95"], 3),
            "relay_vs_es_p50": relay["relay_vs_es_p50"],
            "relay_vs_es_p95": relay["relay_vs_es_p95"],
        }
        for name, r in results.items():
            ratios[f"{name}_api_vs_es_p50"] = r["api_vs_es_p50"]
            ratios[f"{name}_api_vs_es_p95"] = r["api_vs_es_p95"]
        log(
            f"all queries: API p50 {api_p['p50']} p95 {api_p['p95']} ms; Elasticsearch p50 "
            f"{es_p['p50']} p95 {es_p['p95']} ms; ratio p50 {ratios['api_vs_es_p50']}, "
            f"p95 {ratios['api_vs_es_p95']}"
        )
        result = {"benchmark": "search", "metrics": metrics, "peers": peers, "ratios": ratios}
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
    finally:
        stop_all()
        if args.drop and es is not None:
            with contextlib.suppress(Exception):
                log(f"deleted {len(drop_indices(es))} bench indices (--drop)")
    return finish("search", result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    sys.exit(main())
