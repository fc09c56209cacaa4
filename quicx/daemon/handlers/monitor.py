"""
Handlers of monitoring: STATS (either version), WATCH (live events) and
STATUS (the status document).

Each is a monitor query (see L{Connection.monitor_query}); any connection
may ask, and asking fixes no role.
"""

from __future__ import annotations

from quicx.daemon.handlers.connection import Connection
from quicx.daemon.observe.eventbus import EventBus
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.protocol import codec, link, monitor, wire


def stats_v1(conn: Connection, payload: bytes) -> None:
    wire.decode_stats(payload)
    conn.monitor_query()
    # Any connection may ask, and asking does not fix its role: a client
    # may look at the queue before it submits.
    conn.reply(wire.encode_stats_response(conn.queue.stats()))


def stats_v2(conn: Connection, payload: bytes) -> None:
    wire.decode_stats(payload)
    conn.monitor_query()
    conn.reply(monitor.encode_stats_response(conn.queue.stats()))


def watch(conn: Connection, payload: bytes) -> None:
    message = monitor.decode_watch(payload)
    session = conn.session
    assert session is not None
    conn.monitor_query()
    conn.reply(link.encode_info(events(conn.queue).watch(session, message)))


def status(conn: Connection, payload: bytes) -> None:
    monitor.decode_status(payload)
    conn.monitor_query()
    document = conn.status
    if document is None:
        raise Refused(codec.ErrorCode.NOT_FOUND, "this listener serves no status document")
    conn.reply(link.encode_info(document()))


def events(queue: QueueService) -> EventBus:
    """
    The queue's event bus.

    @raise Refused: (NOT_FOUND) the daemon serves no live events.
    """
    bus = queue.event_bus
    if not isinstance(bus, EventBus):
        raise Refused(codec.ErrorCode.NOT_FOUND, "this daemon serves no live events")
    return bus
