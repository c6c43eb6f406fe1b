"""The watcher's bookkeeping without a cluster: events in, records in Redis out (the real
Redis of the tests), a Job gone kept for accounting, a lost node ending its jobs."""

import uuid

import pytest

from apps.compute.backends.kubernetes.settings import KubeSettings
from apps.compute.backends.kubernetes.store import Store
from apps.compute.backends.kubernetes.watch import SELECTORS, ClusterWatch

ATTEMPT = str(uuid.uuid4())
TAG = f"torus:{ATTEMPT}"
NAME = f"t-{ATTEMPT}"


def job_obj(**status) -> dict:
    return {
        "metadata": {
            "name": NAME,
            "namespace": "torus-acme",
            "uid": "u1",
            "resourceVersion": "10",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "annotations": {"torus.io/tag": TAG},
            "labels": {"torus.io/tenant": "acme"},
        },
        "spec": {"parallelism": 1, "suspend": False},
        "status": status,
    }


def pod_obj(phase="Running", node="n1") -> dict:
    return {
        "metadata": {
            "name": f"{NAME}-x",
            "namespace": "torus-acme",
            "resourceVersion": "11",
            "labels": {"torus.io/attempt-id": ATTEMPT},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase, "startTime": "2026-12-01T00:00:01Z"},
    }


@pytest.fixture
def watch():
    settings = KubeSettings(api_url="https://127.0.0.1:1")  # never reached: no thread runs
    w = ClusterWatch(cluster_id=uuid.uuid4(), settings=settings)
    w.listed = set(SELECTORS)
    yield w
    w.store.clear()


def records(w: ClusterWatch) -> dict:
    return w.store.read()[0]


def test_events_become_one_record_per_job_and_only_changes_are_written(watch):
    watch._event(
        "Node",
        {
            "type": "ADDED",
            "object": {
                "metadata": {"name": "n1", "resourceVersion": "1"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
        },
    )
    watch._event("Job", {"type": "ADDED", "object": job_obj(active=1)})
    watch._event("Pod", {"type": "ADDED", "object": pod_obj()})
    watch.flush()
    (record,) = records(watch).values()
    assert (record["tag"], record["state"], record["nodes"]) == (TAG, "Running", ["n1"])
    assert watch.versions == {"Job": "10", "Pod": "11", "Workload": None, "Node": "1"}
    watch._event("Pod", {"type": "MODIFIED", "object": pod_obj()})  # nothing new
    watch.store.r.delete(watch.store.key("jobs"))
    watch.flush()
    assert records(watch) == {}  # unchanged records are not rewritten


def test_a_job_gone_is_kept_for_accounting(watch):
    watch._event("Job", {"type": "ADDED", "object": job_obj(active=1)})
    watch._event("Pod", {"type": "ADDED", "object": pod_obj()})
    watch.flush()
    watch._event("Job", {"type": "DELETED", "object": job_obj(active=1)})
    watch.flush()
    assert records(watch) == {}
    (gone,) = watch.store.gone({TAG, "torus:other"})
    assert gone["state"] == "Deleted" and gone["ended_at"]


def test_a_lost_node_ends_its_jobs(watch):
    watch._event("Job", {"type": "ADDED", "object": job_obj(active=1)})
    watch._event("Pod", {"type": "ADDED", "object": pod_obj()})
    watch.flush()
    watch._event(
        "Node", {"type": "DELETED", "object": {"metadata": {"name": "n1", "resourceVersion": "12"}}}
    )
    watch.flush()  # the Job's deletion fails here (no cluster): it is tried again later
    assert records(watch)[TAG]["state"] == "NodeLost"
    assert set(watch.store.read_lost_nodes()) == {"n1"}
    assert (("torus-acme", NAME)) in watch.dirty


def test_store_heartbeat_and_clear():
    store = Store(uuid.uuid4())
    assert store.read() == ({}, None)
    store.heartbeat()
    assert store.read()[1] is not None
    store.clear()
    assert store.read() == ({}, None)


def test_one_jobs_record_is_read_alone(watch):
    watch._event("Job", {"type": "ADDED", "object": job_obj(active=1)})
    watch.store.heartbeat()
    watch.flush()
    whole, beat = watch.store.read()
    one, beat_too = watch.store.read(tag=TAG)
    assert one == whole and set(one) == {TAG} and beat_too == beat is not None
    assert watch.store.read(tag="torus:no-such-attempt")[0] == {}
