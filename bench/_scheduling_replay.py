"""bench/scheduling.py's replay: the trace's jobs submitted on time, the Slurm phases."""

import threading
import time

from _scheduling_cluster import PARTITION, STOP, BenchSlurm, log

# -- replay ---------------------------------------------------------------------------------


def replay(plan, submit_one, *, threads: int = 4) -> tuple[float, dict]:
    """Call submit_one(job) at each job's arrival time (from a few threads so one slow
    submission does not delay the next); {index: submitted epoch}."""
    submitted: dict = {}
    order = iter(sorted(plan, key=lambda j: j.arrival))
    lock = threading.Lock()
    t0 = time.time() + 1.0

    def worker():
        while not STOP.is_set():
            with lock:
                job = next(order, None)
            if job is None:
                return
            wait = t0 + job.arrival - time.time()
            if wait > 0:
                time.sleep(wait)
            stamp = time.time()
            try:
                if submit_one(job):
                    submitted[job.index] = stamp
            except Exception as exc:  # reported; the replay goes on
                log(f"submit of {job.index} failed: {exc}")

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return t0, submitted


def wait_done(slurm: BenchSlurm, prefix: str, deadline: float, pending_elsewhere=None) -> None:
    """Until no job of the phase is queued or running in Slurm (nor waiting in the platform),
    or the deadline."""
    while time.time() < deadline and not STOP.is_set():
        active = [n for n in slurm.active_names() if n.startswith(prefix)]
        other = pending_elsewhere() if pending_elsewhere else 0
        if not active and not other:
            return
        time.sleep(2.0)


def slurm_runs(slurm: BenchSlurm, prefix: str, submitted: dict, since: float) -> dict:
    """{index: (submitted, start, end)} from Slurm's own times (squeue --json keeps finished
    jobs for MinJobAge), for the phase's job names."""
    runs = {}
    for job in slurm.squeue_json():
        name = str(job.get("name", ""))
        suffix = name[len(prefix) :]
        # the phase's own jobs: an earlier run's of the same name are older than this phase
        if not name.startswith(prefix) or not suffix.isdigit():
            continue
        if float(job.get("submit_time") or 0) < since - 2:
            continue
        index = int(suffix)
        start, end = job.get("start_time") or 0, job.get("end_time") or 0
        state = job.get("job_state")
        if state == "PENDING" or (state == "CANCELLED" and (not start or start >= end)):
            start = 0
        if state in ("RUNNING", "CONFIGURING", "COMPLETING", "PENDING"):
            end = 0
        if index in submitted:
            runs[index] = (submitted[index], float(start) or None, float(end) or None)
    return runs


def slurm_phase(slurm: BenchSlurm, name: str, plan, drain_s: float) -> dict:
    prefix = f"sched-{name}-"
    slurm.cancel_prefix(prefix)

    def submit(job) -> bool:
        out = slurm.run(
            ["sbatch", "--parsable", "-J", f"{prefix}{job.index}", "-A", f"slurm-{job.tenant}",
             "-p", PARTITION, "-N", str(job.nodes), "--ntasks-per-node=1", "-c", "1",
             f"--gres=gpu:{job.gpus_per_node}", f"--mem={1024}", f"--time={job.time_limit_min}",
             "-o", "/dev/null", "-e", "/dev/null", "--wrap", f"exec sleep {job.duration}"]
        )  # fmt: skip
        return bool(out.strip())

    log(f"{name}: replaying {len(plan)} jobs")
    t0, submitted = replay(plan, submit)
    deadline = t0 + max(j.arrival for j in plan) + drain_s
    wait_done(slurm, prefix, deadline)
    end = min(time.time(), deadline)
    slurm.cancel_prefix(prefix)
    return {"t0": t0, "deadline": end, "runs": slurm_runs(slurm, prefix, submitted, t0)}
