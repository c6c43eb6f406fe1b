"""bench/serving.py's cold start: a request that wakes a deployment scaled to zero."""

import json
import threading
import time
from pathlib import Path

from _serving_clients import Conn, Target
from _serving_engine import register_replica, start_engine

from scripts.devstack import Proc


def cold_start(deployment, gateway: Target, engine: Proc, model: Path, logdir: Path) -> dict:
    """The deployment scaled to zero (its replica's engine stopped), then one streaming
    request through the gateway: the gateway calls services.wake and holds the request. A
    thread here stands in for the reconciler, without Slurm: when the deployment wants a
    replica again it starts llama-server and registers it READY (routes.publish). Measured:
    the client's time to its first token, and the parts: request -> wake seen, engine
    start -> healthy. (With Slurm and the reconciler the `woken` event's cold_start_s adds
    scheduling and the reconciler's period: tests/serving/test_gateway_e2e.py.)"""
    from apps.serving import keys, routes
    from apps.serving.models import Deployment, DeploymentState

    engine.stop()
    Deployment.objects.filter(pk=deployment.pk).update(
        state=DeploymentState.IDLE, replicas_desired=0
    )
    deployment.replicas.all().update(state="STOPPED")
    routes.publish(deployment_id=deployment.pk)
    marks: dict = {}

    def reconciler_stand_in() -> None:
        from django.db import connection

        try:
            while time.perf_counter() - marks["sent"] < 120:
                if Deployment.objects.get(pk=deployment.pk).replicas_desired > 0:
                    break
                time.sleep(0.02)
            marks["woken"] = time.perf_counter()
            _, port = start_engine(
                model, logdir, api_key=keys.engine_key(deployment_id=deployment.pk), slots=4
            )
            marks["healthy"] = time.perf_counter()
            register_replica(deployment, port)
            marks["published"] = time.perf_counter()
        finally:
            connection.close()

    body = json.dumps({"prompt": "Hello", "max_tokens": 8, "stream": True}).encode()
    marks["sent"] = time.perf_counter()
    thread = threading.Thread(target=reconciler_stand_in)
    thread.start()
    got = Conn(gateway.port).stream(gateway, body)
    thread.join()

    def ms(a: str, b: str) -> float:
        return round((marks[b] - marks[a]) * 1000, 1)

    return {
        "first_token_ms": round(got["ttft_ms"], 1),
        "latency_ms": round(got["latency_ms"], 1),
        "request_to_wake_ms": ms("sent", "woken"),
        "engine_start_to_healthy_ms": ms("woken", "healthy"),
        "published_to_first_token_ms": round(
            got["ttft_ms"] - (marks["published"] - marks["sent"]) * 1000, 1
        ),
    }
