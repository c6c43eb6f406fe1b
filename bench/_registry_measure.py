"""bench/registry.py's measurement: rounds of each operation, one client and several."""

import copy
import threading
import time

from _common import percentiles
from _registry_mlflow import N_METRICS, N_PARAMS, ONE_REQUEST_OPS, log

# -- the measurement --------------------------------------------------------------------------


ROUND = 10  # calls per system before the other takes its turn


def measure(systems: dict, n: int, warmup: int) -> tuple[dict, dict]:
    """(figures, each system's version numbers): each operation n times per system (after
    `warmup` untimed calls), one client thread, the systems taking turns in rounds of ROUND
    calls so that a change in the machine's load (other work shares the cores) falls on both
    alike: create n versions, move the alias over them, list the newest 50, read the lineage
    of each."""
    out = {name: {} for name in systems}
    numbers = {
        name: [ops.create_version(i) for i in range(warmup)] for name, ops in systems.items()
    }
    created = {name: [] for name in systems}

    def timed(op: str, make_calls) -> None:
        took = {name: [] for name in systems}
        calls = {name: make_calls(name, ops) for name, ops in systems.items()}
        for start in range(0, n, ROUND):
            for name in systems:
                for call in calls[name][start : start + ROUND]:
                    t0 = time.perf_counter()
                    call()
                    took[name].append((time.perf_counter() - t0) * 1000)
        for name, ops in systems.items():
            seconds = sum(took[name]) / 1000
            out[name][op] = {
                "ops_per_second": round(len(took[name]) / seconds, 1),
                "seconds": round(seconds, 3),
                "n": len(took[name]),
                "latency_ms": percentiles(took[name]),
                "requests_per_op": ops.requests.get(op),
            }
            log(
                f"{name} {op}: {out[name][op]['ops_per_second']} ops/s"
                f" (p50 {out[name][op]['latency_ms']['p50']} ms)"
            )

    timed(
        "create_version",
        lambda name, ops: [
            lambda i=i: created[name].append(ops.create_version(warmup + i)) for i in range(n)
        ],
    )
    for name, ops in systems.items():
        numbers[name] += created[name]
        for number in numbers[name][:warmup]:
            ops.move_alias(number)
            ops.list_versions()
            ops.read_lineage(number)
    timed(
        "move_alias",
        lambda name, ops: [lambda x=x: ops.move_alias(x) for x in created[name]],
    )
    listed = {name: [] for name in systems}
    timed(
        "list_versions",
        lambda name, ops: [lambda: listed[name].append(ops.list_versions()) for _ in range(n)],
    )
    seen = {name: [] for name in systems}
    timed(
        "read_lineage",
        lambda name, ops: [
            lambda x=x: seen[name].append(ops.read_lineage(x)) for x in created[name]
        ],
    )
    # the floor: one read of one model row, what any request costs in each stack
    timed("get_model", lambda name, ops: [ops.get_model for _ in range(n)])
    want = {"metrics": N_METRICS, "params": N_PARAMS, "datasets": 1}
    for name in systems:
        if set(listed[name]) != {min(50, len(numbers[name]))}:
            raise AssertionError(f"{name}: list_versions returned {sorted(set(listed[name]))}")
        if any(s != want for s in seen[name]):
            raise AssertionError(f"{name}: lineage read {seen[name][0]}, expected {want}")
    return out, numbers


def _client_of(ops):
    """Another client of the same system: the same state, its own keep-alive connection."""
    import httpx

    clone = copy.copy(ops)
    clone.http = httpx.Client(
        base_url=ops.http.base_url, timeout=60, headers=dict(ops.http.headers)
    )
    return clone


def measure_concurrent(systems: dict, numbers: dict, *, clients: int, n: int) -> dict:
    """Each one-request operation n times per system, from `clients` threads at once (each
    with its own connection, n / clients calls each), the systems in turn, twice, in
    alternating order: ops/s = calls over the wall time of both turns."""
    out = {name: {} for name in systems}
    calls = max(1, n // clients)
    pools = {name: [_client_of(ops) for _ in range(clients)] for name, ops in systems.items()}
    actions = {
        "move_alias": lambda ops, name, i: ops.move_alias(numbers[name][i % len(numbers[name])]),
        "list_versions": lambda ops, name, i: ops.list_versions(),
        "read_lineage": lambda ops, name, i: ops.read_lineage(
            numbers[name][i % len(numbers[name])]
        ),
        "get_model": lambda ops, name, i: ops.get_model(),
    }
    for op in ONE_REQUEST_OPS:
        act = actions[op]
        walls = {name: 0.0 for name in systems}
        for turn in range(2):
            order = list(systems) if turn == 0 else list(reversed(systems))
            for name in order:
                for k, client in enumerate(pools[name]):
                    act(client, name, k)  # warm each connection
                errors = []

                def run(client, offset, name=name, act=act, errors=errors):
                    try:
                        for i in range(calls):
                            act(client, name, offset + i)
                    except Exception as exc:  # reported after the turn
                        errors.append(exc)

                threads = [
                    threading.Thread(target=run, args=(client, k * calls))
                    for k, client in enumerate(pools[name])
                ]
                t0 = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                walls[name] += time.perf_counter() - t0
                if errors:
                    raise RuntimeError(f"{name} {op} with {clients} clients: {errors[0]}")
        for name in systems:
            out[name][op] = round(2 * calls * clients / walls[name], 1)
        log(
            f"{clients} clients, {op}: "
            + ", ".join(f"{name} {out[name][op]} ops/s" for name in systems)
        )
    for pool in pools.values():
        for client in pool:
            client.http.close()
    return out
