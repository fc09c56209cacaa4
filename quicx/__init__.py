"""
Quicx: a small, fast task-queue daemon and its clients, built on Twisted.

The public API, importable from here (see docs/clients.md):

    from quicx import QuicxClient                    # blocking producer and monitor
    from quicx import ClusterClient, open_client     # ... of several daemons
    from quicx import connect, ProducerService       # Twisted producers
    from quicx import ClusterProducerService, open_producer   # ... of several daemons
    from quicx import Worker, Unrecoverable          # the worker runner
    from quicx import submit_dataframe               # Spark
    from quicx import QuicxError, TaskFailed, ...    # what they raise
    from quicx import ProgressReport                 # what a submit's progress callback gets

Each name is imported when first used, so C{import quicx} (or the blocking
client alone) does not load Twisted.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from quicx.clients.address import DEFAULT_ADDRESS
    from quicx.clients.blocking import QuicxClient
    from quicx.clients.blocking_cluster import ClusterClient, open_client
    from quicx.clients.cluster import TaskRef
    from quicx.clients.outcomes import RetryNotice
    from quicx.clients.progress import ProgressReport
    from quicx.clients.requests import Options
    from quicx.clients.spark import submit_dataframe
    from quicx.clients.twisted_client import (
        ProducerService,
        QuicxClientFactory,
        QuicxClientProtocol,
        connect,
    )
    from quicx.clients.twisted_cluster import ClusterProducerService, open_producer
    from quicx.clients.worker import TaskContext, Unrecoverable, Worker
    from quicx.protocol.errors import (
        Busy,
        Conflict,
        ConnectionLost,
        DaemonError,
        Forbidden,
        GroupUnknown,
        InvalidMessage,
        NeedsVersion2,
        NotAcknowledged,
        NotFinished,
        NotFound,
        NotSubmittedHere,
        OutcomeForgotten,
        OutcomeUnknown,
        PayloadTooLarge,
        QueueFull,
        QuicxError,
        TaskCancelled,
        TaskDead,
        TaskExpired,
        TaskFailed,
        TaskUnknown,
        UnknownTaskType,
    )

_PUBLIC = {
    "DEFAULT_ADDRESS": "quicx.clients.address",
    "QuicxClient": "quicx.clients.blocking",
    "ClusterClient": "quicx.clients.blocking_cluster",
    "open_client": "quicx.clients.blocking_cluster",
    "TaskRef": "quicx.clients.cluster",
    "connect": "quicx.clients.twisted_client",
    "ProducerService": "quicx.clients.twisted_client",
    "QuicxClientFactory": "quicx.clients.twisted_client",
    "QuicxClientProtocol": "quicx.clients.twisted_client",
    "ClusterProducerService": "quicx.clients.twisted_cluster",
    "open_producer": "quicx.clients.twisted_cluster",
    "Options": "quicx.clients.requests",
    "RetryNotice": "quicx.clients.outcomes",
    "ProgressReport": "quicx.clients.progress",
    "Worker": "quicx.clients.worker",
    "TaskContext": "quicx.clients.worker",
    "Unrecoverable": "quicx.clients.worker",
    "submit_dataframe": "quicx.clients.spark",
    "submit_dataframe_group": "quicx.clients.spark",
    "QuicxError": "quicx.protocol.errors",
    "DaemonError": "quicx.protocol.errors",
    "QueueFull": "quicx.protocol.errors",
    "InvalidMessage": "quicx.protocol.errors",
    "PayloadTooLarge": "quicx.protocol.errors",
    "UnknownTaskType": "quicx.protocol.errors",
    "TaskFailed": "quicx.protocol.errors",
    "OutcomeUnknown": "quicx.protocol.errors",
    "ConnectionLost": "quicx.protocol.errors",
    "NotAcknowledged": "quicx.protocol.errors",
    "NotFound": "quicx.protocol.errors",
    "Forbidden": "quicx.protocol.errors",
    "Conflict": "quicx.protocol.errors",
    "Busy": "quicx.protocol.errors",
    "TaskCancelled": "quicx.protocol.errors",
    "NeedsVersion2": "quicx.protocol.errors",
    "TaskDead": "quicx.protocol.errors",
    "OutcomeForgotten": "quicx.protocol.errors",
    "TaskExpired": "quicx.protocol.errors",
    "TaskUnknown": "quicx.protocol.errors",
    "GroupUnknown": "quicx.protocol.errors",
    "NotFinished": "quicx.protocol.errors",
    "NotSubmittedHere": "quicx.protocol.errors",
}

__all__ = [
    "DEFAULT_ADDRESS",
    "Busy",
    "ClusterClient",
    "ClusterProducerService",
    "Conflict",
    "ConnectionLost",
    "DaemonError",
    "Forbidden",
    "GroupUnknown",
    "InvalidMessage",
    "NeedsVersion2",
    "NotAcknowledged",
    "NotFinished",
    "NotFound",
    "NotSubmittedHere",
    "Options",
    "OutcomeForgotten",
    "OutcomeUnknown",
    "PayloadTooLarge",
    "ProducerService",
    "ProgressReport",
    "QueueFull",
    "QuicxClient",
    "QuicxClientFactory",
    "QuicxClientProtocol",
    "QuicxError",
    "RetryNotice",
    "TaskCancelled",
    "TaskContext",
    "TaskDead",
    "TaskExpired",
    "TaskFailed",
    "TaskRef",
    "TaskUnknown",
    "UnknownTaskType",
    "Unrecoverable",
    "Worker",
    "__version__",
    "connect",
    "open_client",
    "open_producer",
    "submit_dataframe",
    "submit_dataframe_group",
    "version_line",
]


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'quicx' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


def version_line() -> str:
    """C{quicx VERSION protocol 1, 2}: what C{--version} and C{quicx version} print."""
    from quicx.protocol import codec
    from quicx.protocol.wire import PROTOCOL_VERSION

    return f"quicx {__version__} protocol {PROTOCOL_VERSION}, {codec.VERSION}"
