"""Shared fixtures: two tenants with a user per role, projects, tokens and API clients.

Everything runs against the real PostgreSQL and Redis that `make test` brings up.
"""

import contextlib
import logging
import os
import shutil
import socket
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from apps.tenancy.models import Role
from apps.tenancy.services import token_create
from tests import lanes
from tests.factories import MembershipFactory, ProjectFactory, ProjectMemberFactory, TenantFactory

ROLES = [Role.OWNER, Role.ADMIN, Role.MEMBER, Role.VIEWER]


@dataclass
class TenantWorld:
    tenant: object
    project: object
    users: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)

    def client(self, role: Role) -> APIClient:
        return bearer_client(self.tokens[role])


def bearer_client(token: str | None) -> APIClient:
    client = APIClient()
    if token:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


async def refused_with(communicator) -> int | None:
    """The close code a websocket is refused with: accepted, then closed before any message
    (apps/tenancy/consumers.py::refuse)."""
    connected, _ = await communicator.connect(timeout=5)
    assert connected, "closed before accept: a browser sees HTTP 403, not the reason"
    message = await communicator.receive_output(timeout=5)
    assert message["type"] == "websocket.close", message
    return message.get("code")


def make_world(slug: str) -> TenantWorld:
    slug = shared_name(slug)
    tenant = TenantFactory(slug=slug, name=slug.title())
    world = TenantWorld(tenant=tenant, project=ProjectFactory(tenant=tenant, slug=f"{slug}-proj"))
    for role in ROLES:
        user = MembershipFactory(tenant=tenant, role=role, user__username=f"{slug}-{role}").user
        world.users[role] = user
        _, world.tokens[role] = token_create(actor=None, user=user, tenant=tenant, name="test")
    ProjectMemberFactory(project=world.project, user=world.users[Role.MEMBER])
    return world


# Lanes (docs/ARCHITECTURE.md, Tests in lanes): what a test needs, marked from the fixtures
# it uses, or from its module for those that reach a service without one.
NEEDS_BY_FIXTURE = {
    "slurm": {"slurm_cluster", "control_loop"},
    "kubernetes": {"kube_env", "kube_admin", "kube_platform", "kube_namespace", "k8s"},
    "elasticsearch": {"es", "shipper_loop"},
    "serving": {"tiny_gguf", "serving_area", "serving_loop", "engines", "run_engine"},
    "browser": {"built_ui", "browser_params"},
    "s3": {"s3", "s3_settings"},
    "prometheus": {"prometheus"},
}
NEEDS_BY_PATH = {
    "tests/e2e/": {"browser"},
    "tests/soak/": {"soak", "slurm", "elasticsearch"},
    "tests/datasets/test_s3": {"s3"},
    "tests/identity/test_accounts.py": {"ldap"},
    "tests/tenancy/test_directory_signin.py": {"ldap"},
    "tests/security/test_job_isolation.py": {"ldap"},
    "tests/identity/test_fresh_groups.py": {"ldap"},
    # these make real groups in the directory: their worker's own names and gids
    "tests/tenancy/test_member_leaving.py": {"ldap"},
    "tests/datasets/test_storage.py": {"ldap"},
    "tests/lifecycle/test_purge.py::test_the_migration_retires_orphaned_project_groups": {"ldap"},
    "tests/logs/test_search.py": {"elasticsearch"},
    "tests/kubernetes/test_control_plane.py": {"kubernetes"},
    "tests/kubernetes/test_egress.py": {"kubernetes"},
    "tests/secrets/test_secrets_kubernetes.py": {"kubernetes"},
    "tests/core/test_prometheus.py": {"prometheus"},  # promtool too
    "tests/compute/test_builds_script.py": {"serving"},  # runs the (cached) engine build
}
# A test that takes a fixture of one of these makes its names on it: they get the worker's
# suffix (tests/lanes.py).
CLUSTER_MARKS = {"slurm", "kubernetes", "elasticsearch", "serving", "browser", "s3", "ldap"}
# The serial lane: tests that stop, kill or restart a shared service, or measure the whole
# machine or a shared daemon's counters (prefixes of node ids; each with its reason).
SERIAL = {
    "tests/soak/": "kills slurmctld, slurmd and Elasticsearch for minutes",
    "tests/jobs/test_faults.py": "kills slurmd and slurmctld, sets nodes down",
    "tests/jobs/test_self_healing.py": "sets a shared Slurm node down",
    "tests/logs/test_es_cluster.py": "a three-node Elasticsearch of its own: the machine's memory",
    "tests/logs/test_shipper.py::test_elasticsearch_down": "stops the shared Elasticsearch",
    "tests/kubernetes/test_backend_cluster.py::test_the_apiserver_restarted": "restarts it",
    "tests/kubernetes/test_control_plane.py::test_a_daemon_that_died": "kills kube-scheduler",
    "tests/security/test_job_isolation.py::test_the_directory_down": "stops slapd",
    "tests/jobs/test_dispatch.py::test_reconciler_rpcs_do_not_grow": "sdiag --reset: all RPCs",
    "tests/core/test_beat_lease.py": "times a lease's takeover to the second",
}
# Cluster tests that still write the fixed names (acme-member, p-acme_...) in their bodies:
# they keep those names and run one after another on one worker (xdist_group), as before.
FIXED_NAMES = (
    "tests/security/test_slurm_privacy.py",
    "tests/security/test_job_isolation.py",
    "tests/identity/test_accounts.py",  # seed_demo's acme-member, in the directory
    "tests/tenancy/test_directory_signin.py",
)


# Modules whose tests share what a module-scoped fixture builds (a wheel and its virtualenv, the
# client's virtualenv): their tests run on one worker, so it is built once, not once a worker.
BUILT_ONCE = {
    "tests/packaging/test_wheel.py": "wheel",
    "tests/sdk/test_client_package.py": "client-venv",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        needs = {mark for mark, names in NEEDS_BY_FIXTURE.items() if names & fixtures}
        # tests that make their worker's own names (xdist then renames the node: "...@slurm");
        # those marked by module below make unique names of their own (`lg<uuid>`)
        item.torus_own_names = bool(needs & CLUSTER_MARKS) and not item.nodeid.startswith(
            FIXED_NAMES
        )
        for prefix, marks in NEEDS_BY_PATH.items():
            if item.nodeid.startswith(prefix):
                needs |= marks
        # every test on a shared service hands out uids and gids from its worker's share:
        # the directory is one, the counters one per test database, and a test counting from
        # the directory's highest number (another worker's) gave a gid twice
        item.torus_own_ids = bool(needs & CLUSTER_MARKS) and not item.nodeid.startswith(
            FIXED_NAMES  # (their fixed accounts keep the ids the directory has for them)
        )
        if not needs:
            uses_db = {"db", "transactional_db"} & fixtures or item.get_closest_marker("django_db")
            needs = {"postgres"} if uses_db else {"unit"}
        if any(item.nodeid.startswith(prefix) for prefix in SERIAL):
            needs.add("serial")
        for mark in sorted(needs):
            item.add_marker(mark)
        if item.nodeid.startswith(FIXED_NAMES) or "slurm" in needs:
            # one worker runs them in turn: Slurm tests failed side by side (slurmdbd, the
            # three shared nodes) in the first parallel runs, not yet isolated
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif "kubernetes" in needs:
            # one worker runs them in turn: side by side, one test's lost node or platform
            # role came and went under another's pods (the kwok nodes and roles are shared)
            item.add_marker(pytest.mark.xdist_group("kubernetes"))
        elif "browser" in needs:  # one collectstatic into the static root at a time
            item.add_marker(pytest.mark.xdist_group("browser"))
        elif item.nodeid.startswith(tuple(BUILT_ONCE)):
            item.add_marker(pytest.mark.xdist_group(BUILT_ONCE[item.nodeid.split("::")[0]]))


_suffix = ""  # the current test's suffix for names on shared services (shared_name)


def shared_name(name: str) -> str:
    """A name the current test makes on a shared service (a tenant's slug: its Slurm account,
    POSIX group, namespace, log indices), this xdist worker's own (tests/lanes.py)."""
    return f"{name}{_suffix}"


@pytest.fixture(autouse=True)
def _names_of_this_worker(request, settings):
    """Cluster tests in parallel workers make names of their worker's own, and every test on
    a shared service its uids and gids from the worker's own share of the ranges (neither for
    FIXED_NAMES) (the directory is shared, the counters are per database); the rest keep the
    plain names and the whole ranges, which only their own database sees."""
    global _suffix
    if lanes.INDEX is not None and getattr(request.node, "torus_own_names", False):
        _suffix = lanes.SUFFIX
    if lanes.INDEX is not None and getattr(request.node, "torus_own_ids", False):
        settings.TORUS_UID_RANGE = lanes.id_slice(*settings.TORUS_UID_RANGE)
        settings.TORUS_GID_RANGE = lanes.id_slice(*settings.TORUS_GID_RANGE)
    yield
    _suffix = ""


@pytest.fixture
def celery_worker(transactional_db):
    """A real Celery worker (in a thread) consuming from the real Redis broker."""
    import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for the ping check)
    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    with start_worker(app, pool="solo", perform_ping_check=True, loglevel="WARNING") as worker:
        yield worker


@contextlib.contextmanager
def background_loop(fn, *, interval: float):
    """Call fn() every `interval` seconds in a thread while the block runs (as Celery beat or
    the log shipper would in production)."""
    stop = threading.Event()

    def loop():
        from django.db import connection

        while not stop.is_set():
            try:
                fn()
            except Exception:  # as beat would, the next pass runs: a test waiting on it says
                logging.getLogger("tests").exception("background %s failed", fn.__name__)
                connection.close()  # a broken connection is not used again
            stop.wait(interval)
        connection.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


@pytest.fixture
def asgi_server(transactional_db):
    """The whole ASGI application (HTTP and websockets) served by uvicorn in a thread, on the
    test database and the tests' Redis; `.url` is its base URL."""
    import uvicorn

    from config.asgi import application

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield SimpleNamespace(url=f"http://127.0.0.1:{port}")
    server.should_exit = True
    thread.join(timeout=20)
    # the gateway's request records are written by a thread of their own (apps/serving/
    # records.py): written here, under its lock, before the test database is truncated; a
    # batch written during the TRUNCATE deadlocked with it
    from apps.serving import records

    records.flush()


@pytest.fixture(scope="session", autouse=True)
def _close_stray_connections(django_db_setup, django_db_blocker):
    """Threads (Channels' sync_to_async, Celery's test worker) may keep test-database
    connections open; end them so the test database can be dropped at the end."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND usename = current_user AND backend_type = 'client backend'"
        )  # ours only: an autovacuum worker there is the server's, and not ours to end


@pytest.fixture(autouse=True)
def _clean_cache():
    cache.clear()  # throttle counters live in Redis; each test starts from zero
    yield


@pytest.fixture
def cluster(db):
    """Cluster, partition and nodes as rows only: enough for placement and admission."""
    from tests.factories import ClusterFactory

    return ClusterFactory(name="test")


@pytest.fixture
def acme(db) -> TenantWorld:
    return make_world("acme")


@pytest.fixture
def globex(db) -> TenantWorld:
    return make_world("globex")


@pytest.fixture(autouse=True)
def _job_root(settings):
    """Each test's own job tree, where jobs running as their users can reach it (pytest's
    tmp_path lies under a folder only root may enter)."""
    base = Path(settings.DATA_DIR) / "test-jobs"
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    root = base / uuid.uuid4().hex
    settings.TORUS_JOB_ROOT = str(root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def logs_dir(_job_root) -> Path:
    """A directory for attempts' log files made by hand, below the job root: the platform
    reads a tenant's tree only below its trusted roots (apps/identity/tree.py)."""
    path = _job_root / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def _dataset_cache_root(settings):
    """Each test's own node caches, where jobs can reach them (as the job tree above); the
    stager leaves staged versions read-only, so they are opened up before removal."""
    base = Path(settings.DATA_DIR) / "test-dataset-cache"
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    root = base / uuid.uuid4().hex
    settings.TORUS_DATASET_CACHE_ROOT = str(root)
    yield root
    for path in root.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            os.chmod(path, 0o700)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_channel_layers():
    """A channel layer per test: channels_redis keeps asyncio locks bound to the event loop
    that first used them, and each async test runs in a loop of its own."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# A connection whose thread exits without closing it never goes back to the pool (20); a
# full run then ran dry late, where nothing pointed at the thread that kept them. Each
# checkout is noted with its thread and stack, and a test after which a finished thread
# still holds one fails with that stack.
_checkouts: dict = {}


def _watch_pool() -> None:
    from django.db import connections

    pool = connections["default"].pool
    if getattr(pool, "_torus_watched", False):
        return
    getconn, putconn = pool.getconn, pool.putconn

    def watched_getconn(*args, **kwargs):
        conn = getconn(*args, **kwargs)
        stack = "".join(traceback.format_stack(limit=30)[:-1])
        _checkouts[id(conn)] = (threading.current_thread(), stack)
        return conn

    def watched_putconn(conn):
        _checkouts.pop(id(conn), None)
        return putconn(conn)

    pool.getconn, pool.putconn = watched_getconn, watched_putconn
    pool._torus_watched = True


@pytest.fixture(autouse=True)
def _no_connection_left_by_a_finished_thread(request):
    uses_db = {"db", "transactional_db"} & set(request.fixturenames)
    if uses_db:
        _watch_pool()
    yield
    if not uses_db:
        return
    leaked = [(t, stack) for key, (t, stack) in list(_checkouts.items()) if not t.is_alive()]
    for key in [k for k, (t, _) in list(_checkouts.items()) if not t.is_alive()]:
        _checkouts.pop(key, None)  # reported once
    assert not leaked, "a thread ended holding a pooled connection, checked out at:\n" + (
        "\n".join(f"[{t.name}]\n{stack}" for t, stack in leaked)
    )
