"""
Handlers of the workers: ANNOUNCE (what one runs), WORKERS (list them), STEER (quiet, terminate).

ANNOUNCE takes the worker role's authorization; WORKERS is a monitor
query; STEER needs the admin role.
"""

from __future__ import annotations

from quicx.daemon.handlers.connection import Connection
from quicx.daemon.queue.workers import workers_of
from quicx.protocol import link, workers


def announce(conn: Connection, payload: bytes) -> None:
    message = workers.decode_announce(payload)
    session = conn.session
    assert session is not None
    conn.authorize("worker")
    workers_of(conn.queue).announce(session, message, conn.limits.max_worker_types)


def list_workers(conn: Connection, payload: bytes) -> None:
    message = workers.decode_workers(payload)
    conn.monitor_query()
    found, following = workers_of(conn.queue).page(message.after or 0, workers.WORKERS_PAGE_BYTES)
    if message.after is None:
        conn.reply(link.encode_info(found))
    else:
        conn.reply(link.encode_info({"workers": found, "next": following}))


def steer(conn: Connection, payload: bytes) -> None:
    message = workers.decode_steer(payload)
    conn.require_admin("STEER")
    steering = workers_of(conn.queue)
    if message.action is workers.Steer.QUIET:
        steered = steering.quiet(message.worker)
    else:
        steered = steering.terminate(message.worker, conn.limits.terminate_grace)
    action = "quiet" if message.action is workers.Steer.QUIET else "terminate"
    conn.reply(link.encode_info({"action": action, "workers": steered}))
