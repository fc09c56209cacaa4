"""
Handlers of the task flow: SUBMIT, READY, and a delivery's report (DONE, FAILED, ACK, NACK).

The hot path: each is one function, called straight from the table, that
decodes the frame and calls the queue: a SUBMIT, DONE or ACK its plain path
(L{quicx.daemon.queue.fastpath}), which goes the general way when it must.
"""

from __future__ import annotations

from quicx.daemon.handlers.connection import Connection
from quicx.daemon.queue.workers import credits as steered_credits
from quicx.protocol import codec, outcomes, taskflow, wire
from quicx.protocol.outcomes import ACK_SIZE, NACK_FIXED
from quicx.protocol.session import ProtocolViolation, Role
from quicx.protocol.taskflow import DEFAULT_OPTIONS, Result, ResultKind

_BYTES = int(ResultKind.BYTES)
"""An ACK's result kind that the daemon forwards unread."""


def submit_v1(conn: Connection, payload: bytes) -> None:
    task_type, body = wire.submit_fields(payload)
    session = conn.session
    if session is None or session.role is not Role.PRODUCER or len(task_type) > conn.max_type:
        session = conn.producer(task_type)  # its first SUBMIT, or a bad one: checked there
    conn.fast.submit(session, task_type, body, DEFAULT_OPTIONS, conn.now)


def submit_v2(conn: Connection, payload: bytes) -> None:
    fields = taskflow.submit_fields(payload)
    if fields is not None:
        # No option but a queue and a priority: the common SUBMIT.
        task_type, body, options = fields
        session = conn.session
        if session is None or session.role is not Role.PRODUCER or len(task_type) > conn.max_type:
            session = conn.producer(task_type)
        conn.fast.submit(session, task_type, body, options, conn.now)
        return
    task_type, body, options = taskflow.decode_submit(payload)
    session = conn.producer(task_type, options.key, options.fairness)
    conn.admission.submit(session, task_type, body, options)


def ready_v1(conn: Connection, payload: bytes) -> None:
    credits = wire.decode_ready(payload).credits
    session = conn.session
    assert session is not None
    if session.role is not Role.WORKER:
        conn.authorize("worker")
    conn.queue.claim_role(session, Role.WORKER)
    # More than the limit is not an error: the worker is granted the limit
    # and simply never sees more tasks at once.
    conn.queue.ready(session, min(credits, conn.limits.max_credits))


def ready_v2(conn: Connection, payload: bytes) -> None:
    message = taskflow.decode_ready(payload)
    session = conn.session
    assert session is not None
    if session.role is not Role.WORKER:
        conn.authorize("worker")
    conn.queue.claim_role(session, Role.WORKER)
    if message.queues:
        conn.queue.subscribe(session, message.queues)
    credits = min(message.credits, conn.limits.max_credits)
    if session.card is not None:  # quiet or terminating: none
        credits = steered_credits(session, credits)
    conn.queue.ready(session, credits)


def done(conn: Connection, payload: bytes) -> None:
    session = conn.session
    assert session is not None
    if len(payload) == codec.TASK_ID.size:  # the DONE's one field, in one unpack
        conn.fast.done(session, codec.TASK_ID.unpack(payload)[0], None, conn.now)
        return
    conn.queue.done(session, wire.done_task_id(payload))  # bad: decoding says why


def failed(conn: Connection, payload: bytes) -> None:
    message = wire.decode_failed(payload)
    reason_length = len(payload) - codec.TASK_ID.size
    if reason_length > conn.limits.max_reason_length:
        # Refused, not cut: the worker still holds the task and may send
        # a shorter reason.
        raise ProtocolViolation(
            f"FAILED reason of {reason_length} bytes exceeds max_reason_length"
            f" ({conn.limits.max_reason_length})"
        )
    session = conn.session
    assert session is not None
    conn.queue.failed(session, message.task_id, message.reason)


def unfenced(conn: Connection, payload: bytes) -> None:
    raise ProtocolViolation(
        "a version-2 worker reports with ACK or NACK, quoting the delivery's token"
    )


def ack(conn: Connection, payload: bytes) -> None:
    # The queue refuses a report from a connection that holds no such
    # task, a worker's or not.
    session = conn.session
    assert session is not None
    size = len(payload)
    if size >= ACK_SIZE:  # the common ACKs, in one unpack
        task_id, token = outcomes.ID_TOKEN.unpack_from(payload)
        if task_id:
            if size == ACK_SIZE:  # no result
                conn.fast.done(session, task_id, token, conn.now)
                return
            if payload[ACK_SIZE] == _BYTES:  # bytes: nothing to check in them
                given = Result(ResultKind.BYTES, payload[ACK_SIZE + 1 :])
                conn.fast.done(session, task_id, token, conn.now, given)
                return
    # With a result of text or JSON, or bad: decoding checks it, or says why.
    task_id, token, result = outcomes.decode_ack(payload)
    conn.fast.done(session, task_id, token, conn.now, result)


def nack(conn: Connection, payload: bytes) -> None:
    reason_length = len(payload) - NACK_FIXED
    if reason_length > conn.limits.max_reason_length:
        raise ProtocolViolation(
            f"NACK reason of {reason_length} bytes exceeds max_reason_length"
            f" ({conn.limits.max_reason_length})"
        )
    message = outcomes.decode_nack(payload)
    session = conn.session
    assert session is not None
    conn.queue.nack(session, message.task_id, message.token, message.reason, message.permanent)
