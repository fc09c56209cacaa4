"""
Handlers of a task's outcome and its way there: TOUCH, PROGRESS, AWAIT and GROUP.
"""

from __future__ import annotations

from quicx.daemon.handlers.connection import Connection
from quicx.protocol import link, outcomes
from quicx.protocol.outcomes import GroupOp
from quicx.protocol.session import Role


def touch(conn: Connection, payload: bytes) -> None:
    message = outcomes.decode_touch(payload)
    session = conn.session
    assert session is not None
    conn.queue.touch(session, message.task_id, message.token, message.seconds)


def progress(conn: Connection, payload: bytes) -> None:
    message = outcomes.decode_progress(payload)
    session = conn.session
    assert session is not None
    conn.queue.report_progress(
        session, message.task_id, message.token, message.fraction, message.message
    )


def await_outcome(conn: Connection, payload: bytes) -> None:
    message = outcomes.decode_await(payload)
    session = conn.session
    assert session is not None
    conn.authorize("producer", "monitor")
    conn.queue.await_outcome(session, message.task_id, message.timeout_ms)


def group(conn: Connection, payload: bytes) -> None:
    message = outcomes.decode_group(payload)
    session = conn.session
    assert session is not None
    op = message.op
    if op is GroupOp.OPEN or op is GroupOp.CLOSE:
        if session.role is not Role.PRODUCER:
            conn.authorize("producer")
            conn.queue.claim_role(session, Role.PRODUCER)
        if op is GroupOp.OPEN:
            answer = conn.queue.open_group(session)
        else:
            answer = conn.queue.close_group(message.group)
        conn.reply_when_durable(link.encode_info(answer))
        return
    conn.authorize("producer", "monitor")
    if op is GroupOp.STATE:
        conn.reply(link.encode_info(conn.queue.groups.describe(message.group)))
    else:
        conn.queue.await_group(session, message.group, message.timeout_ms)
