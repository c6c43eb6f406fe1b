"""Database work of async code (websocket consumers, the serving gateway) in the event loop's
pool threads.

Channels' `database_sync_to_async` runs a call in asgiref's one thread for sync code outside a
request context: in a web process every socket's handshake queries, backlog (an Elasticsearch
request) and access recheck wait in a single queue, behind each other. (Django's HTTP views
each get a thread of their own request context; sockets have none.) Here a call runs in one of
the loop's executor threads and hands its connection back to the pool when it ends, itself:
such a thread may exit (the loop closes, the executor shrinks), and a connection it still held
would never return. (Channels' own clean-up is a no-op under its test communicator.) A pooled
connection the server has dropped meanwhile (a restart, an administrator's
pg_terminate_backend) fails its first query, so a call that fails on its connection is run
once more on a fresh one.
"""

import functools

from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from django.db import InterfaceError, OperationalError, connection


def _run(fn, args, kwargs):
    try:
        return fn(*args, **kwargs)
    except (OperationalError, InterfaceError):
        if connection.in_atomic_block:
            raise
        connection.close()
        return fn(*args, **kwargs)
    finally:
        connection.close()


async def in_thread(fn, *args, **kwargs):
    """fn(*args, **kwargs) in a pool thread, its connection handed back after."""
    return await sync_to_async(_run, thread_sensitive=False)(fn, args, kwargs)


def in_pool_thread(fn):
    """Decorate a sync function that queries the database into a coroutine function that runs
    it through `in_thread`."""

    @functools.wraps(fn)
    async def call(*args, **kwargs):
        return await in_thread(fn, *args, **kwargs)

    return call


class QueriesInPoolThreads:
    """For a Channels consumer whose every query goes through `in_pool_thread`: its dispatch
    skips Channels' closing of old connections before each message, which is a hop to the one
    sync thread for every message (each batch of lines, each state change) of every socket."""

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
