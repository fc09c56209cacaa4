"""
Handlers of a task's outcome and its way there: TOUCH, PROGRESS, CHECKPOINT, AWAIT and GROUP.
"""

from __future__ import annotations

from quicx.daemon.handlers.connection import Connection
from quicx.daemon.queue.model import Refused
from quicx.protocol import checkpoints, link, outcomes
from quicx.protocol.codec import ErrorCode
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


def checkpoint(conn: Connection, payload: bytes) -> None:
    # Answered with a CHECKPOINT that names the task and the token, kept or
    # refused: a worker matches it without counting answers.
    task_id, token, state = checkpoints.decode_checkpoint(payload)
    session = conn.session
    assert session is not None
    try:
        conn.queue.checkpoints.save(session, task_id, token, state)
    except Refused as e:
        conn.queue.limit_hit(session.peer.peer_name, e)
        conn.reply(checkpoints.encode_checkpointed(task_id, token, e.code, str(e)))
        return
    conn.reply_when_durable(
        checkpoints.encode_checkpointed(task_id, token),
        lambda why: checkpoints.encode_checkpointed(
            task_id,
            token,
            ErrorCode.QUEUE_FULL,
            f"kept, but not journaled ({why}): a restart may undo it",
        ),
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
