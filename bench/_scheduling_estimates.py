"""bench/scheduling.py's expected-start check (issue 36): during a Torus phase, every second,
each waiting job's expected start as the platform gives it (apps/jobs/estimates.py, read from
Redis as the API reads it) and Slurm's own (`squeue --start`) for the same jobs; after it,
how the first of each (the prediction at submission) and all of them compare with the actual
starts, and a PNG of predicted against actual waits."""

import json
import threading
import time
from pathlib import Path

from _scheduling_cluster import BenchSlurm, log

LONG_WAIT_S = 60.0  # "waited more than a minute (replay time)"


class EstimateSampler:
    """Samples both estimates once a second in a thread, from start() to stop()."""

    def __init__(self, slurm: BenchSlurm, *, cluster_id, prefix: str):
        self.slurm, self.cluster_id, self.prefix = slurm, cluster_id, prefix
        self.torus: dict = {}  # job id -> [(sampled at, p10, p50, p90), ...]
        self.slurm_start: dict = {}  # job name -> [(sampled at, predicted start), ...]
        self.reasons: dict = {}  # job name -> [(sampled at, Slurm's pending reason), ...]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        from apps.core.generations import redis_client
        from apps.jobs.estimate_store import BINS, store_key

        self._stop.set()
        self._thread.join(30)
        client = redis_client()
        self.residuals = [  # per bin of predicted wait
            client.llen(store_key(f"residuals:{n}", self.cluster_id)) for n in range(len(BINS) + 1)
        ]

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._sample_torus()
                self._sample_slurm()
            except Exception as exc:  # a missed sample is a gap, not a failed phase
                log(f"estimate sample failed: {exc}")

    def _sample_torus(self) -> None:
        from apps.core.generations import redis_client
        from apps.jobs.estimate_store import META, range_of, store_key

        raw = redis_client().hgetall(store_key("now", self.cluster_id))
        meta = raw.pop(META.encode(), None)
        if meta is None:
            return
        meta = json.loads(meta)
        made = meta["computed_at"]  # the prediction's time: the pass's, not this sample's
        for job_id, value in raw.items():
            text = value.decode()
            if text.startswith("!"):
                continue
            p10, p50, p90 = range_of(made, float(text.split()[0]), meta["factors"])
            samples = self.torus.setdefault(job_id.decode(), [])
            if not samples or samples[-1][0] != made:
                samples.append((made, p10, p50, p90))

    def _sample_slurm(self) -> None:
        from datetime import datetime

        out = self.slurm.run(["squeue", "--start", "-h", "-t", "PD", "-o", "%j|%S|%r"], check=False)
        now = time.time()
        for line in out.splitlines():
            name, _, rest = line.partition("|")
            start, _, reason = rest.partition("|")
            if not name.startswith(self.prefix):
                continue
            self.reasons.setdefault(name, []).append((now, reason))
            if start in ("N/A", "", "Unknown"):
                continue
            try:  # squeue prints the controller's local time, as this process's
                at = datetime.fromisoformat(start).timestamp()
            except ValueError:
                continue
            self.slurm_start.setdefault(name, []).append((now, at))


def estimate_report(sampler: EstimateSampler, *, names: dict, runs: dict, png: Path) -> dict:
    """Coverage of p10-p90 and the share within 2x of p50 (jobs that waited over a minute),
    at submission (each job's first estimate) and over every sample; Slurm's `squeue --start`
    the same way for the same jobs; `names` maps job id -> name, `runs` index ->
    (submitted, start, end)."""
    first_torus, every_torus, first_slurm, every_slurm, long_ids = [], [], [], [], []
    for job_id, samples in sampler.torus.items():
        name = names.get(job_id, "")
        index = name[len(sampler.prefix) :]
        run = runs.get(int(index)) if index.isdigit() else None
        if not run or not run[1]:
            continue
        submitted, start = run[0], run[1]
        # predictions made while it still waited (a pass may see a job that has just started)
        rows = [
            (at, p10, p50, p90, start, submitted) for at, p10, p50, p90 in samples if at < start
        ]
        if not rows:
            continue
        first_torus.append(rows[0])
        every_torus.extend(rows)
        if start - submitted > LONG_WAIT_S:
            long_ids.append(job_id)
        slurm_rows = [(at, p, start, submitted) for at, p in sampler.slurm_start.get(name, [])]
        slurm_rows = [row for row in slurm_rows if row[0] < start]
        every_slurm.extend(slurm_rows)
        if slurm_rows:
            first_slurm.append(slurm_rows[0])
    long_names = {names.get(i) for i in long_ids}
    report = {
        "jobs_with_a_torus_estimate": len(first_torus),
        "jobs_with_a_slurm_estimate": len(first_slurm),
        "jobs_that_waited_over_60s": len(long_ids),
        "calibration_residuals_at_the_end": sampler.residuals,
        "torus_at_submission": _shares(first_torus, long=False),
        "torus_every_sample": _shares(every_torus, long=False),
        "torus_at_submission_long_waits": _shares(
            [r for r in first_torus if r[4] - r[5] > LONG_WAIT_S], long=True
        ),
        "slurm_at_first_estimate": _slurm_shares(first_slurm),
        "slurm_every_sample": _slurm_shares(every_slurm),
        "slurm_long_waits": _slurm_shares([r for r in first_slurm if r[2] - r[3] > LONG_WAIT_S]),
        "long_wait_jobs_slurm_estimated": sum(1 for n in long_names if sampler.slurm_start.get(n)),
    }
    report["png"] = _plot(png, first_torus, first_slurm)
    png.with_suffix(".json").write_text(json.dumps({"torus": first_torus, "slurm": first_slurm}))
    return report


def _shares(rows: list, *, long: bool) -> dict:
    """rows: (sampled at, p10, p50, p90, actual start, submitted)."""
    if not rows:
        return {"n": 0}
    covered = sum(1 for _, p10, _, p90, start, _ in rows if p10 - 2 <= start <= p90 + 2)
    within = sum(1 for at, _, p50, _, start, _ in rows if _within_2x(p50 - at, start - at))
    ten = sum(1 for _, _, p50, _, start, _ in rows if abs(start - p50) <= 600)
    return {
        "n": len(rows),
        "p10_p90_coverage": round(covered / len(rows), 3),
        "within_2x_of_p50": round(within / len(rows), 3),
        "within_10_min_of_p50": round(ten / len(rows), 3),
    }


def _slurm_shares(rows: list) -> dict:
    """rows: (sampled at, predicted start, actual start, submitted)."""
    if not rows:
        return {"n": 0}
    within = sum(1 for at, predicted, start, _ in rows if _within_2x(predicted - at, start - at))
    ten = sum(1 for _, predicted, start, _ in rows if abs(start - predicted) <= 600)
    return {
        "n": len(rows),
        "within_2x": round(within / len(rows), 3),
        "within_10_min": round(ten / len(rows), 3),
    }


def _within_2x(predicted_wait: float, actual_wait: float) -> bool:
    """Within a factor of 2, the waits taken from the sample's time (5 s of slack: the pass
    and the sample are each a second or two apart)."""
    predicted, actual = max(predicted_wait, 0.0) + 5, max(actual_wait, 0.0) + 5
    return actual / 2 <= predicted <= actual * 2


def _plot(path: Path, torus: list, slurm: list) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib (pip install -e '.[bench]'): no PNG")
        return None
    fig, ax = plt.subplots(figsize=(6.5, 6))
    actual = [max(r[4] - r[0], 0.5) for r in torus]
    p50 = [max(r[2] - r[0], 0.5) for r in torus]
    low = [max(p - max(r[1] - r[0], 0.5), 0) for p, r in zip(p50, torus, strict=True)]
    high = [max(max(r[3] - r[0], 0.5) - p, 0) for p, r in zip(p50, torus, strict=True)]
    ax.errorbar(actual, p50, yerr=[low, high], fmt="o", ms=2.5, lw=0.5, alpha=0.5,
                label="Torus p50 (p10-p90)")  # fmt: skip
    if slurm:
        ax.plot([max(r[2] - r[0], 0.5) for r in slurm], [max(r[1] - r[0], 0.5) for r in slurm],
                "x", ms=3, alpha=0.6, label="Slurm squeue --start")  # fmt: skip
    top = max([*actual, *p50, 1.0]) * 1.5
    ax.plot([0.5, top], [0.5, top], "k--", lw=0.8, label="exact")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("actual wait from the first estimate (s, replay time)")
    ax.set_ylabel("predicted wait (s)")
    ax.set_title("Expected start at submission against the actual start")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
