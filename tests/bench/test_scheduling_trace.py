"""bench/scheduling.py's trace handling and metrics: the assignment is deterministic and the
figures are what their definitions say (no services needed)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _scheduling_report import spread
from _scheduling_tail import tail_report
from _scheduling_trace import (
    TraceJob,
    allocation_bound,
    allocation_while_waiting,
    busiest_window,
    phase_metrics,
    reference_schedule,
    reference_starts,
    replay_plan,
    tenant_of,
    user_of,
)


def plan_of(jobs, *, hours: float, nodes: int, node_gpus: int = 8, load: float = 1, cap=2):
    """The replay plan of trace jobs from trace second 0, at the benchmark's compression."""
    return replay_plan(
        jobs, cluster="c", window_start=0, window_hours=hours, compression=720, load=load,
        keep_fraction=1.0, node_gpus=node_gpus, nodes=nodes, cap_hours=cap, prefix="",
    )  # fmt: skip


def test_tenants_and_users_are_a_function_of_the_job_id():
    ids = [f"job-{i}" for i in range(4000)]
    first = [(tenant_of("c", i), user_of("c", i, tenant_of("c", i))) for i in ids]
    assert first == [(tenant_of("c", i), user_of("c", i, tenant_of("c", i))) for i in ids]
    share = {t: sum(1 for x, _ in first if x == t) / len(ids) for t, _ in first}
    assert share["sched-a"] == pytest.approx(0.40, abs=0.03)
    assert share["sched-d"] == pytest.approx(0.10, abs=0.02)
    assert {u for _, u in first if u.startswith("sched-b")} == {"sched-b-u0", "sched-b-u1"}


def test_the_plan_compresses_caps_and_splits_big_jobs():
    jobs = [
        TraceJob("a", 3600, 7200, 1),
        TraceJob("b", 7200, 100 * 3600, 16),  # capped at 2 h; two 8-GPU nodes
        TraceJob("c", 99 * 3600, 600, 1),  # outside the window
    ]
    plan, info = plan_of(jobs, hours=4, nodes=4, load=2.0)
    assert [(j.arrival, j.duration, j.nodes, j.gpus_per_node) for j in plan] == [
        (2.5, 10.0, 1, 1),  # 3600 s / (720 x 2)
        (5.0, 10.0, 2, 8),
    ]
    assert info["replay_seconds"] == 10.0
    assert info["jct_floor_s"] == 10.0  # the mean duration
    assert info["offered_load"] == pytest.approx((10 + 16 * 10) / (32 * 10), abs=1e-3)


def test_the_busiest_window_is_the_one_with_most_gpu_seconds():
    jobs = [TraceJob("a", 0, 3600, 1), TraceJob("b", 5 * 3600, 3600, 8)]
    assert busiest_window(jobs, 2, 3600) == 4 * 3600  # first hour-aligned window holding b


def test_phase_metrics():
    plan, _ = plan_of(
        [TraceJob("x", 0, 7200, 4), TraceJob("y", 0, 7200, 4), TraceJob("z", 0, 7200, 4)],
        hours=1,
        nodes=1,
    )
    runs = {0: (100.0, 100.0, 110.0), 1: (100.0, 110.0, 120.0)}  # the third never started
    m = phase_metrics(plan, runs, capacity=8, t0=100.0, deadline=140.0, scale=0.2)
    assert (m["finished"], m["never_ran"]) == (2, 1)
    assert m["gpu_allocation"] == pytest.approx((4 * 10 + 4 * 10) / (8 * 40))
    assert m["jct_mean_s"] == 15.0
    assert m["queue_delay_p95_s"] == 10.0


def test_allocation_bound_is_set_by_the_last_long_job():
    plan, _ = plan_of(
        [TraceJob("x", 0, 3600, 8), TraceJob("y", 1800, 3600, 8)], hours=1, nodes=2, cap=1
    )
    # 16 GPUs: x runs 0-5 s, y 2.5-7.5 s at best; 80 GPU-seconds over 16 x 7.5
    assert allocation_bound(plan, capacity=16) == pytest.approx(80 / (16 * 7.5), abs=1e-3)
    # 8 GPUs: the work itself (10 s of the whole cluster) is the shortest makespan
    assert allocation_bound(plan, capacity=8) == 1.0


def test_allocation_while_waiting_counts_only_seconds_with_a_job_queued():
    plan, _ = plan_of(
        [TraceJob("x", 0, 7200, 4), TraceJob("y", 0, 7200, 4), TraceJob("z", 0, 7200, 8)],
        hours=1,
        nodes=1,
    )
    # x runs 100-110 s; y waits 100-105 then runs 105-115; z waits 100-115, runs 115-125
    runs = {0: (100.0, 100.0, 110.0), 1: (100.0, 105.0, 115.0), 2: (100.0, 115.0, 125.0)}
    busy, span = allocation_while_waiting(plan, runs, capacity=8, deadline=200.0)
    assert span == 15.0  # 100-115: z queued
    assert busy == pytest.approx((4 * 5 + 8 * 5 + 4 * 5) / (8 * 15), abs=1e-3)
    m = phase_metrics(plan, runs, capacity=8, t0=100.0, deadline=200.0, scale=0.2)
    assert (m["gpu_allocation_while_waiting"], m["waiting_s"]) == (busy, span)
    # a job that never starts waits until the deadline, with the GPUs idle
    busy, span = allocation_while_waiting(plan, {0: (100.0, None, None)}, capacity=8,
                                          deadline=120.0)  # fmt: skip
    assert (busy, span) == (0.0, 20.0)


def three_on_one_node():
    """One node of 2 GPUs; a 1-GPU job runs 0-10 s, a 2-GPU job comes at 1 s, a 1-GPU one at 7."""
    plan, _ = plan_of(
        [TraceJob("a", 0, 7200, 1), TraceJob("b", 720, 7200, 2), TraceJob("c", 5040, 7200, 1)],
        hours=2,
        nodes=1,
        node_gpus=2,
    )
    return plan


def test_the_ideal_schedules_fifo_smallest_first_and_the_starving_rule():
    plan = three_on_one_node()
    ideal = {
        order: reference_schedule(plan, nodes=1, node_gpus=2, order=order)
        for order in ("fifo", "smallest")
    }
    # FIFO: b blocks c; b 10-20, c 20-30 (JCT 10, 19, 23)
    assert (ideal["fifo"]["jct_mean_s"], ideal["fifo"]["makespan_s"]) == (17.33, 30.0)
    # smallest first: c passes b at 7 s (7-17), b runs 17-27 (JCT 10, 26, 10)
    assert (ideal["smallest"]["jct_mean_s"], ideal["smallest"]["makespan_s"]) == (15.33, 27.0)
    # b starving after 5 s of waiting (at 6 s): it keeps its room, c no longer passes it
    starving = reference_schedule(plan, nodes=1, node_gpus=2, order="smallest", starving_s=5)
    assert starving == ideal["fifo"]
    # a starving time longer than b waits changes nothing
    late = reference_schedule(plan, nodes=1, node_gpus=2, order="smallest", starving_s=20)
    assert late == ideal["smallest"]


def test_the_tail_report_compares_the_largest_job_with_the_ideal_start():
    # smallest first, b (the largest) ideally starts at 17 s
    plan = three_on_one_node()
    ideal = reference_starts(plan, nodes=1, node_gpus=2, order="smallest")
    assert ideal == {0: 0.0, 2: 7.0, 1: 17.0}
    t0 = 1000.0
    runs = {0: (t0, t0, t0 + 10), 1: (t0 + 1, t0 + 30, t0 + 40), 2: (t0 + 7, t0 + 7, t0 + 17)}
    # b waited 3 s in the platform, then 10 s behind c (Priority), 16 s for nodes (Resources)
    samples = [(t0 + 4 + k, "Priority") for k in range(10)]
    samples += [(t0 + 14 + k * 4, "Resources") for k in range(5)]
    report = tail_report(plan, runs, t0=t0, ideal=ideal, platform_s={1: 3.0}, reasons={1: samples})
    (row,) = report["jobs"]
    assert (row["index"], row["start_s"], row["late_s"], row["platform_s"]) == (1, 30.0, 13.0, 3.0)
    assert row["after_last_arrival"] is True  # the last arrival is c's, at 7 s
    assert row["slurm_reasons_s"] == {"Priority": 10.0, "Resources": 16.0}
    assert report["summary"]["late_mean_s"] == 13.0
    assert report["summary"]["ideal_after_last_arrival"] == 1
    # a job that never started is counted, not dropped
    report = tail_report(plan, {}, t0=t0, ideal=ideal)
    assert report["summary"]["never_started"] == 1


def test_the_spread_of_runs_is_the_median_and_range_of_every_number():
    runs = [
        {"alloc": 0.8, "tail": {"late": 5}, "name": "x", "ok": True},
        {"alloc": 0.7, "tail": {"late": 9}, "name": "y", "ok": False},
        {"alloc": 0.9, "tail": {"late": 1}, "name": "z", "ok": True},
    ]
    assert spread(runs) == {
        "alloc": {"median": 0.8, "min": 0.7, "max": 0.9},
        "tail": {"late": {"median": 5, "min": 1, "max": 9}},
    }
