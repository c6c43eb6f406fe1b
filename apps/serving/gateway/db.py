"""The gateway's few database calls, each in a pool thread off the event loop
(apps/core/db_threads.py: the connection handed back after each, a dropped one retried once)."""

import asyncio

from apps.core.db_threads import in_thread

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
