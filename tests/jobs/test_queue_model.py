"""The queue played forward (apps/jobs/queue_model.py): reservations, backfill, quotas."""

from apps.jobs.queue_model import Pool, Running, Waiting, simulate

POOL = {"gpu": Pool(gpus=4, cpus=32)}


def waiting(key, gpus, seconds, tenant="t"):
    return Waiting(key, "gpu", tenant, gpus, 1, seconds)


def test_a_job_that_does_not_fit_starts_when_the_running_one_ends():
    running = [Running("gpu", "t", 4, 1, 600.0)]
    starts = simulate(
        now=0.0, pools=POOL, running=running, waiting=[waiting("a", 4, 300), waiting("b", 1, 100)]
    )
    assert starts == {"a": 600.0, "b": 900.0}


def test_a_small_short_job_backfills_but_never_delays_the_first_one():
    running = [Running("gpu", "t", 2, 1, 600.0)]
    jobs = [waiting("big", 4, 300), waiting("short", 2, 300), waiting("long", 2, 1000)]
    starts = simulate(now=0.0, pools=POOL, running=running, waiting=jobs)
    # "short" ends before the big job's reservation; "long" would delay it, so it waits
    assert starts["short"] == 0.0
    assert starts["big"] == 600.0
    assert starts["long"] == 900.0


def test_a_tenant_quota_holds_its_jobs_and_lets_others_pass():
    pools = {"gpu": Pool(gpus=8, cpus=32)}
    jobs = [waiting("x1", 2, 100, "q"), waiting("x2", 2, 100, "q"), waiting("y", 2, 100, "free")]
    starts = simulate(now=0.0, pools=pools, running=[], waiting=jobs, tenant_limits={"q": 2})
    assert starts == {"x1": 0.0, "y": 0.0, "x2": 100.0}


def test_gpus_held_on_another_cluster_count_against_the_quota():
    jobs = [waiting("x", 2, 100, "q")]
    starts = simulate(
        now=0.0,
        pools=POOL,
        running=[Running("gpu", "q", 1, 1, 50.0)],
        waiting=jobs,
        tenant_limits={"q": 3},
        tenant_held_elsewhere={"q": 2},
    )
    assert starts == {}  # 2 elsewhere (never ending here) + 2 > 3 once the local one ends


def test_what_can_never_fit_gets_no_time_and_holds_no_one_back():
    jobs = [waiting("huge", 16, 100), waiting("ok", 1, 100), waiting("over", 4, 100, "q")]
    starts = simulate(now=0.0, pools=POOL, running=[], waiting=jobs, tenant_limits={"q": 2})
    assert starts == {"ok": 0.0}


def test_ten_thousand_jobs_play_out_in_order_of_capacity():
    pools = {"gpu": Pool(gpus=64, cpus=512)}
    jobs = [Waiting(i, "gpu", i % 5, 1 + i % 8, 4, 600.0 + i % 7 * 60) for i in range(10_000)]
    starts = simulate(now=0.0, pools=pools, running=[], waiting=jobs)
    assert len(starts) == 10_000
    work = sum(job.gpus * job.seconds for job in jobs)
    makespan = max(starts[job.key] + job.seconds for job in jobs)
    assert work / (64 * makespan) > 0.85  # packed: the pool is busy most of the time
    # in order, mostly: a job's start is rarely far before an earlier, equal-sized one's
    first, later = jobs[0], jobs[8]
    assert starts[first.key] <= starts[later.key]


def test_a_start_is_said_to_the_second_near_and_to_the_minute_far():
    near = [Running("gpu", "t", 4, 1, 10.0)]
    assert simulate(now=0.0, pools=POOL, running=near, waiting=[waiting("a", 4, 60)]) == {"a": 10.0}
    # ends 20 s apart: a minute out, two events; an hour out, one, a minute on
    for first in (60.0, 3600.0):
        ends = [Running("gpu", "t", 2, 1, first), Running("gpu", "t", 2, 1, first + 20)]
        starts = simulate(now=0.0, pools=POOL, running=ends, waiting=[waiting("b", 4, 60)])
        assert starts == {"b": first + 20 if first < 600 else first + 60}


def test_where_the_cluster_lends_a_job_over_its_quota_borrows_what_nobody_claims():
    pools = {"gpu": Pool(gpus=8, cpus=32)}
    jobs = [waiting("x1", 2, 100, "q"), waiting("x2", 2, 100, "q"), waiting("y", 2, 100, "free")]
    starts = simulate(
        now=0.0, pools=pools, running=[], waiting=jobs, tenant_limits={"q": 2}, lending=True
    )
    assert starts == {"x1": 0.0, "y": 0.0, "x2": 0.0}  # 4 GPUs idle: x2 borrows 2
    # a waiting job of another tenant claims the idle GPUs even while it does not fit
    running = [Running("gpu", "free", 4, 1, 300.0)]
    jobs = [waiting("x1", 2, 100, "q"), waiting("big", 6, 100, "free"), waiting("x2", 2, 50, "q")]
    starts = simulate(
        now=0.0, pools=pools, running=running, waiting=jobs, tenant_limits={"q": 2}, lending=True
    )
    # x2 is not lent the 2 GPUs big claims; it starts within its quota when x1 ends, ending
    # before big's reservation
    assert starts == {"x1": 0.0, "big": 300.0, "x2": 100.0}
