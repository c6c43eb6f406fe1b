"""Serving gateway benchmark: the same streaming completions sent to a llama-server replica
directly and through the gateway (/serve/<id>/v1/completions on the portal's uvicorn), in the
same run, at 1, 4 and 16 concurrent clients; and a cold start from zero replicas.

  direct   POST http://127.0.0.1:<replica>/v1/completions with the engine key
  gateway  POST http://127.0.0.1:<portal>/serve/<deployment>/v1/completions with a tenant
           token: authentication, route table, least-in-flight pick, SSE relayed, a record
  relay    the direct request through HAProxy in `mode tcp` (Debian's): no HTTP parsing, no
           authentication; the least any proxy in front of the engine costs, for scale

Each request streams (`stream: true`, `ignore_eos`, `max_tokens` tokens, so every answer has
the same length); a client is a thread on a keep-alive connection (http.client) that reads
the server-sent events as they come. The paths take turns in rounds (the machine's load,
shared with other work, falls on both alike). Per path and concurrency: tokens/s (all tokens
over the summed wall time of its rounds), time to first token and whole-request latency
p50/p95. Ratios are gateway over direct (aims: latency <= 1.1x, throughput >= 0.9x).

Cold start: the deployment scaled to zero, one request through the gateway, which wakes it
and holds the request; a thread stands in for the reconciler (starts llama-server and
registers the replica when the deployment wants one again, no Slurm). The time to the first
token and its parts.

Run alone:  .venv/bin/python bench/serving.py [--quick] [--requests N] [--keep-logs]
Progress goes to stderr; the last stdout line is the result:
{"benchmark": "serving", "metrics": {...}, "peers": {...}, "ratios": {...}}
"""

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TORUS_REDIS_DB_BASE", "10")  # its web server's Redis databases: 10-12

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ROOT,
    django_setup,
    environment,
    finish,
    manage,
    percentiles,
    process_cpu_seconds,
)
from _serving_clients import Target, measure, ratios
from _serving_cold import cold_start
from _serving_engine import CONCURRENCY, fixture, log, make_model, register_replica, start_engine
from _serving_upstream import upstream_clients

from scripts.devstack import start_relay, start_web, stop_all


def environment_again() -> dict:
    from django.db import connection

    connection.close()  # a long run: the server may have dropped the connection meanwhile
    return environment()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per round")
    parser.add_argument("--requests", type=int, help="requests per round and path")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per path (alternating)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--slots", type=int, default=4, help="the replica's parallel slots")
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    parser.add_argument("--keep-logs", action="store_true")
    args, unknown = parser.parse_known_args()  # run_all passes its arguments to every script
    if unknown:
        log(f"ignoring arguments meant for other benchmarks: {' '.join(unknown)}")
    requests = args.requests or (16 if args.quick else 32)
    rounds = args.rounds
    logdir = Path(tempfile.mkdtemp(prefix="torus-bench-serving-"))

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result = None
    try:
        manage("migrate", "--noinput", "--verbosity", "0")
        django_setup()
        from apps.serving import keys

        env_start = environment()
        world, deployment = fixture(slots=args.slots, max_tokens=args.max_tokens)
        model = make_model(logdir)
        engine, engine_port = start_engine(
            model, logdir, api_key=keys.engine_key(deployment_id=deployment.pk), slots=args.slots
        )
        replica = register_replica(deployment, engine_port)
        web, web_port = start_web(logdir, workers=1)
        _, relay_port = start_relay(engine_port, logdir, mode="tcp", check="/health")
        log(f"replica :{engine_port}, gateway :{web_port}, relay :{relay_port}")
        targets = [
            Target(
                "direct",
                engine_port,
                "/v1/completions",
                keys.engine_key(deployment_id=deployment.pk),
                fresh=True,
            ),
            Target("gateway", web_port, f"/serve/{deployment.pk}/v1/completions", world["token"]),
            Target(
                "relay",
                relay_port,
                "/v1/completions",
                keys.engine_key(deployment_id=deployment.pk),
                fresh=True,
            ),
        ]
        cpu_before = {"engine": process_cpu_seconds(engine.popen.pid)}
        cpu_before["web"] = process_cpu_seconds(web.popen.pid)
        levels = [int(c) for c in args.concurrency.split(",")]
        measured = measure(
            targets, levels=levels, requests=requests, rounds=rounds, max_tokens=args.max_tokens
        )
        cpu = {
            "engine_cpu_s": round(process_cpu_seconds(engine.popen.pid) - cpu_before["engine"], 1),
            "gateway_cpu_s": round(process_cpu_seconds(web.popen.pid) - cpu_before["web"], 1),
        }
        time.sleep(2)  # the gateway's records of the last requests are written
        from apps.serving.models import ServingRequest

        rows = ServingRequest.objects.filter(deployment=deployment, status=200)
        recorded = {
            "requests": rows.count(),
            "ttft_ms": percentiles([r for r in rows.values_list("ttft_ms", flat=True) if r]),
            "latency_ms": percentiles(list(rows.values_list("latency_ms", flat=True))),
        }
        log(f"the gateway's own records: {json.dumps(recorded)}")
        log("upstream clients: httpx beside raw asyncio, sequential, to the replica")
        upstream = upstream_clients(
            engine_port,
            keys.engine_key(deployment_id=deployment.pk),
            requests=max(20, requests),
            max_tokens=args.max_tokens,
        )
        log("cold start: the deployment scaled to zero, one request through the gateway")
        cold = cold_start(deployment, targets[1], engine, model, logdir)
        log(f"cold start: {json.dumps(cold)}")
        gateway_requests = sum(measured[f"gateway_c{c}"]["requests"] for c in levels)
        cpu["gateway_cpu_ms_per_request"] = round(
            cpu["gateway_cpu_s"] * 1000 / max(1, gateway_requests + sum(levels)), 2
        )
        result = {
            "benchmark": "serving",
            "metrics": {
                **{f"gateway_c{c}": measured[f"gateway_c{c}"] for c in levels},
                **cpu,
                "upstream_client": upstream,
                "cold_start": cold,
                "gateway_recorded": recorded,
                "requests_per_round": requests,
                "rounds": rounds,
                "max_tokens": args.max_tokens,
                "slots": args.slots,
                "replica": str(replica.pk),
                "environment_start": env_start,
                "environment_end": environment_again(),
            },
            "peers": {
                **{f"direct_c{c}": measured[f"direct_c{c}"] for c in levels},
                **{f"relay_c{c}": measured[f"relay_c{c}"] for c in levels},
            },
            "ratios": {
                **ratios(measured, levels),
                "upstream_first_bytes_p50_httpx_vs_raw_asyncio": round(
                    upstream["httpx"]["first_bytes_ms"]["p50"]
                    / upstream["raw_asyncio"]["first_bytes_ms"]["p50"],
                    3,
                ),
            },
        }
        log(f"ratios (gateway over direct): {json.dumps(result['ratios'])}")
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        stop_all()
    return finish("serving", result, logdir=logdir, keep_logs=args.keep_logs)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
