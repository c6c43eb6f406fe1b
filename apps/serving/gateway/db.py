"""The gateway's few database calls, each in a worker thread off the event loop.

Each call hands its connection back to the pool when it ends: a worker thread of the
loop's executor may exit (the loop closes, the executor shrinks) and a connection it still
held would never return to the pool. A pooled connection the server has dropped meanwhile
(a restart, an administrator's pg_terminate_backend) fails its first query, so a call that
fails on its connection is run once more on a fresh one.
"""

import asyncio

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connection


def _run(fn, kwargs):
    try:
        return fn(**kwargs)
    except (OperationalError, InterfaceError):
        if connection.in_atomic_block:
            raise
        connection.close()
        return fn(**kwargs)
    finally:
        connection.close()


async def in_thread(fn, **kwargs):
    return await sync_to_async(_run, thread_sensitive=False)(fn, kwargs)


_flights: dict = {}


async def once(key, fn, **kwargs):
    """in_thread(fn), shared by the callers that ask for the same `key` while it runs (the
    requests that all find a token expired at once read it once)."""
    loop = asyncio.get_running_loop()
    flight_key = (id(loop), key)
    future = _flights.get(flight_key)
    if future is None:
        future = _flights[flight_key] = asyncio.ensure_future(in_thread(fn, **kwargs))
        future.add_done_callback(lambda _: _flights.pop(flight_key, None))
    return await asyncio.shield(future)
