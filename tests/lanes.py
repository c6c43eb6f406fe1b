"""What each pytest-xdist worker owns, set before Django's settings load (`-p tests.lanes`).

`make test` runs the suite in two lanes (docs/ARCHITECTURE.md, Tests in lanes): workers in
parallel, then the serial lane. Each worker has its own PostgreSQL test database
(pytest-django's `test_<name>_gw<N>`), its own three Redis databases (Celery's broker, the
cache, the channel layer: settings read TORUS_REDIS_DB_BASE), and a suffix for the names a
test makes on the shared services (tenant slugs, usernames: Slurm accounts, POSIX accounts
and groups, Kubernetes namespaces, Elasticsearch indices); tests/conftest.py applies it.
"""

import os

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...; "" outside xdist
INDEX = int(WORKER[2:]) if WORKER.startswith("gw") else None

# Redis has 16 databases: 0-2 are the platform's, 8-10 the tests' outside xdist (Makefile).
# Worker N takes three free ones in a row: 8-10, 11-13, 3-5.
REDIS_BASES = (8, 11, 3)


def redis_base(index: int) -> int:
    if index >= len(REDIS_BASES):
        raise RuntimeError(
            f"pytest-xdist worker {index}: Redis has databases for {len(REDIS_BASES)} workers"
            " (tests/lanes.py REDIS_BASES); run with -n 3 or fewer"
        )
    return REDIS_BASES[index]


if INDEX is not None:
    os.environ["TORUS_REDIS_DB_BASE"] = str(redis_base(INDEX))

# Appended to the names a test makes on a shared service; empty outside xdist, so the serial
# lane and a plain `pytest` make the same names as before.
SUFFIX = f"-w{INDEX}" if INDEX is not None else ""


def id_slice(low: int, high: int) -> tuple[int, int]:
    """This worker's share of a uid or gid range (its upper half cut in eight): numbers its
    tests hand out that no other worker's can (each test database counts on its own)."""
    mid = (low + high + 1) // 2
    size = (high - mid + 1) // 8
    start = mid + INDEX * size
    return start, start + size - 1
