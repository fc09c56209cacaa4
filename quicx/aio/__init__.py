"""
The asyncio client and worker: Quicx on the application's own event loop.

The asyncio client and worker (C{quicx.aio}): L{AsyncClient} (every call of
the blocking client, as a coroutine), L{AsyncClusterClient} (several daemons,
placed as L{quicx.clients.cluster} says), L{open_client}, and L{AsyncWorker}
(C{async def} handlers, run on the loop).  Native asyncio: no Twisted, no
threads; uvloop works too.
"""

from quicx.aio.client import AsyncClient, EventStream
from quicx.aio.cluster import AsyncClusterClient, open_client
from quicx.aio.worker import AsyncWorker
from quicx.clients.context import TaskContext
from quicx.clients.reports import Unrecoverable

__all__ = [
    "AsyncClient",
    "AsyncClusterClient",
    "AsyncWorker",
    "EventStream",
    "TaskContext",
    "Unrecoverable",
    "open_client",
]
