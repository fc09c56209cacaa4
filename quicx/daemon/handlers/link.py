"""
Handlers of the link itself: HELLO (what this daemon is and can do), HEARTBEAT and PONG.
"""

from __future__ import annotations

from typing import Any

import quicx
from quicx.daemon.handlers import monitor, shared_data
from quicx.daemon.handlers.connection import Connection
from quicx.protocol import link, wire

CAPABILITIES = (
    "queues",
    "priorities",
    "idempotency",
    "cancel",
    "pause",
    "purge",
    "peek",
    "inspect",
    "fairness",
    "rate-limits",
    "delays",
    "retries",
    "dead-letters",
    "leases",
    "schedules",
    "progress",
    "shared",
    "results",
    "groups",
    "events",
    "trace",
    "checkpoints",
    "workers",
    "debounce",
    "expiry",
    "bulk",
)
"""What a version-2 HELLO is told this daemon can do."""


def hello(conn: Connection, payload: bytes) -> None:
    message = link.decode_hello(payload)
    session = conn.session
    assert session is not None
    session.client = " ".join(filter(None, (message.name, message.version)))
    queue = conn.queue
    limits = queue.limits
    shared = shared_data.kept(queue).limits
    subscribers = monitor.events(queue).limits
    conn.reply(
        link.encode_info(
            {
                "server": "quicx",
                "version": quicx.__version__,
                "protocol": sorted(limits.versions),
                "capabilities": list(CAPABILITIES),
                "missing": [c for c in message.capabilities if c not in CAPABILITIES],
                "limits": {
                    "max_payload": queue.pool.max_size,
                    "max_credits": conn.limits.max_credits,
                    "max_queues": limits.max_queues,
                    "max_key_length": limits.max_key_length,
                    "max_type_length": conn.limits.max_type_length,
                    "max_progress_message": queue.progress.settings.max_message,
                    "max_checkpoint": queue.checkpoints.settings.max_size,
                    "max_shared_size": shared.max_size,
                    "max_shared_names": shared.max_names,
                    "max_shared_memory": shared.max_memory,
                    "max_result": queue.max_result,
                    "max_reason": conn.limits.max_reason_length,
                    "max_result_ttl": limits.results.max_ttl,
                    "max_wait": limits.results.max_wait,
                    "max_waiters_per_connection": limits.results.max_waiters_per_connection,
                    "max_groups": limits.groups.max_groups,
                    "max_subscribers": subscribers.max_subscribers,
                    "max_held_events": subscribers.max_held,
                },
                **_role(conn),
            }
        )
    )


def _role(conn: Connection) -> dict[str, Any]:
    """C{role}, C{epoch} and C{primary}, when replication is on (else nothing)."""
    roles = conn.replication
    return {} if roles is None else roles.describe()


def heartbeat_v1(conn: Connection, payload: bytes) -> None:
    wire.decode_heartbeat(payload)
    conn.reply(wire.PONG_FRAME)


def heartbeat_v2(conn: Connection, payload: bytes) -> None:
    wire.decode_heartbeat(payload)
    conn.reply(link.PONG_FRAME)


def pong(conn: Connection, payload: bytes) -> None:
    # Its arrival already counted as a sign of life.
    wire.decode_pong(payload)
