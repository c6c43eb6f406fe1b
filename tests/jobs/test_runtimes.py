"""Run times from past runs (apps/jobs/runtimes.py): each job at its own quantile of them."""

import uuid
from types import SimpleNamespace

from apps.jobs import runtimes

PAST = [float(s) for s in range(100, 1001, 10)]  # 91 runs, 100 s to 1,000 s


def job(n: int):
    spec = {"resources": {"time_limit": 60}}
    return SimpleNamespace(id=str(uuid.UUID(int=n)), user_id=1, project_id="p", name="t", spec=spec)


def known() -> runtimes.History:
    runs = runtimes.Runs(PAST, "91 past runs")
    return runtimes.History(by_name={(1, "p", "t"): runs}, by_user={}, by_project={})


def test_shares_spread_evenly_over_many_jobs():
    shares = [runtimes.share(str(uuid.uuid4())) for _ in range(2000)]
    assert all(0 < s < 1 for s in shares)
    for decile in range(10):
        inside = sum(1 for s in shares if decile / 10 <= s < (decile + 1) / 10)
        assert 120 <= inside <= 280  # 200 expected


def test_running_jobs_end_spread_as_their_past_runs_did_not_all_at_the_median():
    left = sorted(runtimes.remaining_seconds(job(n), known(), ran=50.0) for n in range(40))
    # forty jobs 50 s in: the first ends early in the spread, the last late, not all at 500
    assert left[0] < 200 and left[-1] > 800
    assert 250 < left[20] < 750
    # a job keeps its place every pass: 300 s later it has 300 s less to run (or has outlived
    # the runs below it and is looked up among the longer ones)
    again = runtimes.remaining_seconds(job(3), known(), ran=350.0)
    assert again >= runtimes.remaining_seconds(job(3), known(), ran=50.0) - 300


def test_a_waiting_job_takes_its_quantile_within_its_time_limit():
    took = runtimes.run_seconds(PAST, 3600.0, at=runtimes.share(job(7).id))
    assert took in PAST
    assert runtimes.run_seconds(PAST, 150.0, at=0.99) == 150.0  # the limit bounds it
    assert runtimes.run_seconds([], 150.0, at=0.5) == 150.0  # no runs: the limit
